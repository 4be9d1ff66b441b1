# The evaluator's build inputs as a store path, selected by evaluator-inputs.json: the single
# declaration that runner/evaluator/inputs.py reads too. Its NAR SHA-256 is `evaluator_digest`
# (tests/reproducibility checks that `nix-hash` of this path equals the Python digest).
# Builtins only, so it evaluates without nixpkgs.
{ root }:
let
  decl = builtins.fromJSON (builtins.readFile (root + "/evaluator-inputs.json"));
  rootStr = toString root;
  hasPrefix = pre: s: builtins.substring 0 (builtins.stringLength pre) s == pre;
  hasSuffix = suf: s:
    let ls = builtins.stringLength s; lf = builtins.stringLength suf;
    in ls >= lf && builtins.substring (ls - lf) lf s == suf;
  declared = map (p: rootStr + "/" + p) decl.paths;
  # A path is kept when it is declared, lies inside a declared directory, or is an ancestor
  # directory of a declared path (so the copy can descend to it).
  wanted = path: builtins.any
    (d: path == d || hasPrefix (d + "/") path || hasPrefix (path + "/") d) declared;
  excluded = path:
    let n = baseNameOf path;
    in builtins.elem n decl.exclude_names || builtins.any (s: hasSuffix s n) decl.exclude_suffixes;
in
builtins.path {
  path = root;
  name = "afb-evaluator-inputs";
  filter = path: type: wanted (toString path) && !(excluded (toString path));
}
