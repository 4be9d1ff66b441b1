"""`bench images build|digest|inputs|fetch`: sandbox images built reproducibly from their
declared inputs (images/<name>/image.toml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from runner.cli.app import app, guarded, out
from runner.evaluator.core.errors import InputError

images_app = typer.Typer(help="Sandbox images from declared inputs (images/<name>/).")
app.add_typer(images_app, name="images")
ImageDir = Annotated[Path, typer.Argument(help="an image folder, e.g. images/swe-lite")]


def _check(image_dir: Path) -> None:
    if not (image_dir / "image.toml").is_file():
        raise InputError("not an image folder (no image.toml)", file=str(image_dir))


@images_app.command("build")
@guarded
def build(
    image_dir: ImageDir,
    if_missing: Annotated[bool, typer.Option(help="only build when the tag is missing")] = False,
    archive: Annotated[
        Path | None, typer.Option("--out", help="also keep the docker-archive in this folder")
    ] = None,
    load: Annotated[bool, typer.Option(help="load the image into Podman")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the image identity as JSON")] = (
        False
    ),
) -> None:
    """Build the image with mmdebstrap (SOURCE_DATE_EPOCH) and load it into Podman."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    if if_missing and (archive is not None or not load):
        raise InputError("--if-missing reuses a loaded image: it takes no --out or --no-load")
    if if_missing:
        built = images.ensure_image(image_dir)
    else:
        built = images.build_image(image_dir, out_dir=archive, load=load)
    if as_json:
        out.print_json(json.dumps(built.as_json(), sort_keys=True))
    else:
        out.print(f"{built.tag} {built.image_id} (inputs {built.input_digest})")


@images_app.command("digest")
@guarded
def digest(image_dir: ImageDir) -> None:
    """Print the digest of an image's declared inputs (what its tag is derived from)."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    out.print(images.image_input_digest(image_dir))


@images_app.command("inputs")
@guarded
def inputs(image_dir: ImageDir) -> None:
    """Print an image's declared inputs as JSON (what the digest is computed over)."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    out.print_json(json.dumps(images.image_inputs(image_dir), sort_keys=True))


@images_app.command("fetch")
@guarded
def fetch(image_dir: ImageDir) -> None:
    """Fetch (sha256-verified, cached) the pinned sources an image bakes in."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    for ref, path in images.fetch_image_sources(image_dir):
        out.print(f"{ref} {path}")
