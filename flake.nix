{
  # agent-fault-bench as a Nix flake:
  #   nix run .#bench -- specs/swe-lite.toml     run the main job (bench run SPEC)
  #   nix run .#bench -- plan specs/swe-lite.toml   any other bench command
  #   nix flake check                            rebuilds and cross-checks the evaluator digest
  # Python dependencies come from uv.lock through uv2nix, so the flake and the evaluator digest
  # see the same versions. The evaluator's inputs and the image inputs are read from the same
  # declarations the Python code reads (evaluator-inputs.json, images/*/image.toml).
  # The installed `bench` finds its project data (images/, specs/, witnesses/, ...) through
  # AFB_ROOT, which the wrapper and the evaluator image set to a store copy (README, "Nix").
  description = "A witnessed fault-injection benchmark for AI agent runs";

  inputs = {
    # Pinned by revision (no flake.lock can be computed on the development machine: it has no
    # network). nixpkgs: the nixos-25.11 branch on 2026-05-10; the uv2nix family: the revisions
    # evaluated against each other by tests/reproducibility/test_nix_eval.py. README, "Nix".
    nixpkgs.url = "github:NixOS/nixpkgs/8fd9daa3db09ced9700431c5b7ad0e8ba199b575";
    pyproject-nix = {
      url = "github:pyproject-nix/pyproject.nix/7af23cfe91064865ecf2e835da28b45b3c6f49fd";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    uv2nix = {
      url = "github:pyproject-nix/uv2nix/49dac8d206c42175b069b7c6050ba27060a21106";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    pyproject-build-systems = {
      url = "github:pyproject-nix/build-system-pkgs/90ffdeee1a4929b231913df067448cd9803d3e07";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.uv2nix.follows = "uv2nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs = { self, nixpkgs, pyproject-nix, uv2nix, pyproject-build-systems }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      lib = nixpkgs.lib;
      python = pkgs.python311;

      # --- Python environment, honouring uv.lock exactly -----------------------------------
      workspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = ./.; };
      overlay = workspace.mkPyprojectOverlay { sourcePreference = "wheel"; };
      pythonSet = (pkgs.callPackage pyproject-nix.build.packages { inherit python; }).overrideScope
        (lib.composeManyExtensions [ pyproject-build-systems.overlays.default overlay ]);
      venv = pythonSet.mkVirtualEnv "agent-fault-bench-env" workspace.deps.default;

      # --- The evaluator's inputs: the same selection as runner/evaluator/inputs.py ---------
      evaluatorInputs = import ./nix/evaluator-inputs.nix { root = ./.; };

      # --- The project data an installed bench reads (AFB_ROOT): a store copy ---------------
      # (builtins.path with a filter, like nix/evaluator-inputs.nix: evaluates on older Nix too)
      projectData = builtins.path {
        path = ./.;
        name = "afb-project-data";
        filter = path: type:
          let rel = lib.removePrefix (toString ./. + "/") (toString path);
          in builtins.elem (builtins.head (lib.splitString "/" rel))
            [ "evaluator-inputs.json" "uv.lock" "runner" "schemas" "witnesses" "images" "specs" ];
      };

      # --- The flake's sandbox image: its own declaration, images/swe-lite-nix/image.toml ----
      # Not images/swe-lite (a Debian suite + baked task sources, built by `bench images build`):
      # another image with its own inputs, whose input-digest label is computed as builder.py
      # computes every image's (nix/image-inputs.nix; tests/reproducibility/test_nix.py).
      sweLiteNix = import ./nix/image-inputs.nix { imageDir = ./images/swe-lite-nix; };
      sweLiteNixContents =
        assert sweLiteNix.conf.packages
          == [ "bash" "coreutils" "gnupatch" "python311" "python311Packages.pytest" ];
        assert sweLiteNix.conf.nixpkgs == (nixpkgs.rev or sweLiteNix.conf.nixpkgs);
        [ pkgs.bash pkgs.coreutils pkgs.gnupatch (pkgs.python311.withPackages (ps: [ ps.pytest ])) ];

      # Unix seconds -> "YYYY-MM-DDTHH:MM:SSZ" (dockerTools' stream_layered_image.py parses
      # `created` with datetime.fromisoformat). Days to civil date: H. Hinnant's algorithm.
      isoUtc = epoch:
        let
          div = builtins.div;
          pad = n: if n < 10 then "0${toString n}" else toString n;
          days = div epoch 86400;
          secs = epoch - days * 86400;
          z = days + 719468;
          era = div z 146097;
          doe = z - era * 146097;
          yoe = div (doe - div doe 1460 + div doe 36524 - div doe 146096) 365;
          doy = doe - (365 * yoe + div yoe 4 - div yoe 100);
          mp = div (5 * doy + 2) 153;
          d = doy - div (153 * mp + 2) 5 + 1;
          m = if mp < 10 then mp + 3 else mp - 9;
          y = yoe + era * 400 + (if m <= 2 then 1 else 0);
        in
        "${toString y}-${pad m}-${pad d}T${pad (div secs 3600)}:${pad (div (secs - div secs 3600 * 3600) 60)}:${pad (secs - div secs 60 * 60)}Z";

      runtimeTools = [ pkgs.podman pkgs.runc pkgs.conmon pkgs.nftables pkgs.iproute2
                       pkgs.mmdebstrap pkgs.coreutils pkgs.gnutar pkgs.nix ];

      # `nix run .#bench -- SPEC.toml` means `bench run SPEC.toml`; anything else is passed on.
      # The venv's own `bench` is exec'd by its store path: writeShellApplication's PATH is
      # runtimeInputs only, and the wrapper's name shadows the venv's.
      benchApp = pkgs.writeShellApplication {
        name = "bench";
        runtimeInputs = runtimeTools;
        text = ''
          export AFB_ROOT="''${AFB_ROOT:-${projectData}}"
          case "''${1:-}" in
            *.toml) exec ${venv}/bin/bench run "$@" ;;
            *) exec ${venv}/bin/bench "$@" ;;
          esac
        '';
      };

      # Sandbox image via dockerTools: fixed creation time; name, tag and input-digest label as
      # runner/imagebuild/builder.py derives them from the declaration, so `podman load` gives
      # the tag `bench` looks for (localhost/afb-swe-lite-nix:<12 hex of the digest>).
      sweLiteImage = pkgs.dockerTools.buildLayeredImage {
        inherit (sweLiteNix) name tag;
        created = isoUtc sweLiteNix.conf.source_date_epoch;
        contents = sweLiteNixContents;
        extraCommands = ''
          mkdir -p usr/local/bin run tmp
          cp ${./images/swe-lite-nix + "/${sweLiteNix.conf.entrypoint}"} usr/local/bin/afb-init
          chmod 0755 usr/local/bin/afb-init
        '';
        config = {
          Entrypoint = [ "/usr/local/bin/afb-init" ];
          Labels."org.agent-fault-bench.input-digest" = sweLiteNix.digest;
        };
      };

      # Evaluator image: the locked environment plus exactly the declared evaluator inputs.
      evaluatorImage = pkgs.dockerTools.buildLayeredImage {
        name = "localhost/afb-evaluator";
        tag = "nix";
        created = isoUtc 1;
        contents = [ venv ];
        extraCommands = ''
          mkdir -p opt/afb
          cp -r ${evaluatorInputs}/. opt/afb/
        '';
        config = {
          Entrypoint = [ "${venv}/bin/bench" ];
          WorkingDir = "/opt/afb";
          # The installed bench reads its data (witnesses, schemas, the declaration) from here.
          Env = [ "AFB_ROOT=/opt/afb" ];
          Labels = {
            # The store path is content-addressed by the inputs' NAR hash (= evaluator_digest).
            "org.agent-fault-bench.evaluator-inputs" = "${evaluatorInputs}";
          };
        };
      };
    in
    {
      packages.${system} = {
        bench = benchApp;
        default = benchApp;
        # A derivation (flake show / check require one) whose output is a copy of the selected
        # inputs: its NAR hash is evaluator_digest, as the check below requires.
        evaluator-inputs = pkgs.runCommand "afb-evaluator-inputs" { } "cp -R ${evaluatorInputs} $out";
        sandbox-image = sweLiteImage;
        evaluator-image = evaluatorImage;
      };

      apps.${system} = {
        bench = { type = "app"; program = "${benchApp}/bin/bench"; };
        default = self.apps.${system}.bench;
      };

      checks.${system} = {
        # Rebuild the evaluator digest two ways and require equality: nix-hash over the store
        # path that the flake's own filter selects, and the Python code over the checkout.
        evaluator-digest = pkgs.runCommand "evaluator-digest-check"
          { nativeBuildInputs = [ pkgs.nix venv ]; } ''
          nar="sha256:$(nix-hash --type sha256 ${evaluatorInputs})"
          py=$(cd ${self} && python -c \
            'from pathlib import Path; from runner.evaluator.core.inputs import evaluator_digest; print(evaluator_digest(Path(".")))')
          if [ "$nar" != "$py" ]; then
            echo "evaluator digest mismatch: nix $nar, python $py" >&2
            exit 1
          fi
          echo "$nar" > $out
        '';
      };
    };
}
