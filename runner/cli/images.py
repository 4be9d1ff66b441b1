"""`bench images build|digest`: sandbox images built reproducibly from their declared inputs."""

from __future__ import annotations

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
) -> None:
    """Build the image with mmdebstrap (SOURCE_DATE_EPOCH) and load it into Podman."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    built = images.ensure_image(image_dir) if if_missing else images.build_image(image_dir)
    out.print(f"{built.tag} {built.image_id} (inputs {built.input_digest})")


@images_app.command("digest")
@guarded
def digest(image_dir: ImageDir) -> None:
    """Print the digest of an image's declared inputs (what its tag is derived from)."""
    from runner.imagebuild import builder as images

    _check(image_dir)
    out.print(images.image_input_digest(image_dir))
