{
  # agent-fault-bench as a Nix flake:
  #   nix run .#bench -- specs/swe-lite.toml     run the main job (bench run SPEC)
  #   nix run .#bench -- plan specs/swe-lite.toml   any other bench command
  #   nix flake check                            rebuilds and cross-checks the evaluator digest
  # Python dependencies come from uv.lock through uv2nix, so the flake and the evaluator digest
  # see the same versions. The evaluator's inputs and the image inputs are read from the same
  # declarations the Python code reads (evaluator-inputs.json, images/*/image.toml).
  description = "A witnessed fault-injection benchmark for AI agent runs";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.11";
    pyproject-nix = {
      url = "github:pyproject-nix/pyproject.nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    uv2nix = {
      url = "github:pyproject-nix/uv2nix";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    pyproject-build-systems = {
      url = "github:pyproject-nix/build-system-pkgs";
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

      # --- Image inputs, read from images/<name>/image.toml ----------------------------------
      imageDecl = name: builtins.fromTOML (builtins.readFile (./images + "/${name}/image.toml"));
      sweLite = imageDecl "swe-lite";
      # Nix's toJSON sorts keys and writes compact JSON, i.e. RFC 8785 bytes for this plain data.
      sweLiteInputDigest = "sha256:" + builtins.hashString "sha256" (builtins.toJSON sweLite);
      created = "@${toString sweLite.source_date_epoch}";

      runtimeTools = [ pkgs.podman pkgs.runc pkgs.conmon pkgs.nftables pkgs.iproute2
                       pkgs.mmdebstrap pkgs.coreutils pkgs.gnutar pkgs.nix ];

      bench = pkgs.writeShellApplication {
        name = "bench";
        runtimeInputs = [ venv ] ++ runtimeTools;
        # `nix run .#bench -- SPEC.toml` means `bench run SPEC.toml`; anything else is passed on.
        text = ''
          case "''${1:-}" in
            *.toml) exec bench-py run "$@" ;;
            *) exec bench-py "$@" ;;
          esac
        '';
      };
      benchPy = pkgs.runCommand "bench-py" { } ''
        mkdir -p $out/bin
        ln -s ${venv}/bin/bench $out/bin/bench-py
      '';
      benchApp = pkgs.symlinkJoin { name = "agent-fault-bench"; paths = [ bench benchPy ]; };

      # Sandbox image via dockerTools: fixed creation time, labels carry the input digests.
      sweLiteImage = pkgs.dockerTools.buildLayeredImage {
        name = "localhost/${sweLite.name}";
        tag = "nix";
        inherit created;
        contents = [
          (python.withPackages (ps: [ ps.pytest ]))
          pkgs.gnupatch pkgs.coreutils pkgs.bash
        ];
        extraCommands = ''
          mkdir -p usr/local/bin run tmp
          cp ${./images/swe-lite/afb-init} usr/local/bin/afb-init
          chmod 0755 usr/local/bin/afb-init
        '';
        config = {
          Entrypoint = [ "/usr/local/bin/afb-init" ];
          Labels = {
            "org.agent-fault-bench.image-inputs" = sweLiteInputDigest;
            "org.agent-fault-bench.builder" = "nix-dockerTools";
          };
        };
      };

      # Evaluator image: the locked environment plus exactly the declared evaluator inputs.
      evaluatorImage = pkgs.dockerTools.buildLayeredImage {
        name = "localhost/afb-evaluator";
        tag = "nix";
        created = "@1";
        contents = [ venv ];
        extraCommands = ''
          mkdir -p opt/afb
          cp -r ${evaluatorInputs}/. opt/afb/
        '';
        config = {
          Entrypoint = [ "${venv}/bin/bench" ];
          WorkingDir = "/opt/afb";
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
        evaluator-inputs = evaluatorInputs;
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
            'from pathlib import Path; from runner.evaluator.inputs import evaluator_digest; print(evaluator_digest(Path(".")))')
          if [ "$nar" != "$py" ]; then
            echo "evaluator digest mismatch: nix $nar, python $py" >&2
            exit 1
          fi
          echo "$nar" > $out
        '';
      };
    };
}
