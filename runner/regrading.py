"""`bench regrade RUN_DIR|BUNDLE`: old evidence judged by this evaluator into a NEW directory,
signed when a signing key is configured (as `bench run` / `bench evaluate` sign theirs). The
source is only read; each new scorecard's `derived_from` names the source's scorecard."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.evaluator.core.inputs import evaluator_digest
from runner.evaluator.publish.regrade import Regraded, default_out, regrade


def regrade_and_sign(
    source: Path, out_dir: Path | None = None, log: Callable[[str], object] = print
) -> Regraded:
    """Regrade `source` into `out_dir` (default: SOURCE.regraded-<digest>), then sign the new
    directory when a key is configured; `log` is told what was signed, or how to sign."""
    from runner.signing.sign import sign_if_keyed

    digest = evaluator_digest()
    done = regrade(source, out_dir or default_out(source, digest), digest)
    sign_if_keyed(done.out_dir, log)
    return done
