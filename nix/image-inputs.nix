# The declared inputs and input digest of a sandbox image built by the flake, computed exactly as
# runner/imagebuild/builder.py computes them (image_inputs, image_input_digest): sha256 over the
# canonical JSON of { builder, image = image.toml, sources, files.entrypoint }. Nix's toJSON
# sorts keys and writes compact JSON: RFC 8785 bytes for plain data (no floats). Builtins only.
{ imageDir }:
let
  conf = builtins.fromTOML (builtins.readFile (imageDir + "/image.toml"));
  # builder.py BUILDERS["nix-dockerTools"]
  builder =
    if (conf.builder or "mmdebstrap") == "nix-dockerTools" then "afb-images-nix/1"
    else throw "${toString imageDir}: builder ${conf.builder or "mmdebstrap"} is not the flake's (mmdebstrap images: bench images build)";
  inputs = {
    inherit builder;
    image = conf;
    sources =
      if conf ? task_sources then throw "${toString imageDir}: task sources are baked by the mmdebstrap builder only"
      else [ ];
    files.entrypoint = "sha256:" + builtins.hashFile "sha256" (imageDir + "/${conf.entrypoint}");
  };
  digest = "sha256:" + builtins.hashString "sha256" (builtins.toJSON inputs);
in
{
  inherit conf inputs digest;
  # builder.py image_tag: localhost/<name>:<first 12 hex of the digest>
  name = "localhost/${conf.name}";
  tag = builtins.substring 7 12 digest;
}
