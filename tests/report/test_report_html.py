"""The HTML report without a browser: determinism, self-containment, one square per cell, and
the publication boundary (an incomplete subject's outcomes leave no trace in the file)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from runner.cli.main import app
from runner.report import load_run, render_html, write_report
from tests.report.conftest import BUNDLE, build_incomplete

runner = CliRunner()
HASH = re.compile(
    r"sha256:[0-9a-f]{64}|sha256-[A-Za-z0-9+/=]{44}|\b[0-9a-f]{64}\b|\b[0-9a-f]{16}\b"
)


def _section(html: str, subject: str) -> str:
    m = re.search(rf'<section class="subject [a-z]+" id="subj-\d+" data-subject="{subject}">'
                  r".*?</section>", html, re.S)  # fmt: skip
    assert m, subject
    return m.group(0)


def test_bundle_report_is_deterministic_and_has_every_cell(tmp_path: Path) -> None:
    html = render_html(load_run(BUNDLE))
    assert render_html(load_run(BUNDLE)) == html
    rp = load_run(BUNDLE, timelines=False).protocol
    for subject in rp.identities.subject_config_hashes:
        sec = _section(html, subject)
        assert 'class="subject publishable"' in sec
        assert len(re.findall(r'<rect class="cell ', sec)) == len(rp.slots)
        assert len(set(re.findall(r'data-cell="(sha256:[0-9a-f]{64})"', sec))) == len(rp.slots)
    assert rp.identities.protocol_hash in html and "frozen" in html
    assert 'id="comparison"' in html


def test_cli_writes_the_report_and_junit_beside_the_results(bundle_copy: Path) -> None:
    r = runner.invoke(app, ["report", str(bundle_copy)])
    assert r.exit_code == 0, r.output
    assert (bundle_copy / "results/report.html").read_text() == render_html(load_run(BUNDLE))
    r = runner.invoke(app, ["report", str(bundle_copy), "--junit"])
    assert r.exit_code == 0, r.output
    assert (bundle_copy / "results/junit.xml").read_bytes().startswith(b"<?xml")


def test_cli_refuses_what_is_not_an_evaluated_run(tmp_path: Path) -> None:
    assert runner.invoke(app, ["report", str(tmp_path)]).exit_code == 2
    (tmp_path / "protocol.json").write_bytes((BUNDLE / "protocol.json").read_bytes())
    r = runner.invoke(app, ["report", str(tmp_path)])  # no evidence beside it: refused as such
    assert r.exit_code == 3 and "journals: missing" in r.output
    for part in ("journals", "blobs"):
        shutil.copytree(BUNDLE / part, tmp_path / part)
    r = runner.invoke(app, ["report", str(tmp_path)])  # evidence, not evaluated
    assert r.exit_code == 2 and "bench evaluate" in r.output


def test_no_network_csp_and_no_external_url() -> None:
    html = render_html(load_run(BUNDLE))
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp and "default-src 'none'" in csp.group(1)
    assert "unsafe-inline" not in csp.group(1) and "unsafe-eval" not in csp.group(1)
    # No URL scheme anywhere (the bundle's evidence holds none; the SVG needs no namespace URL).
    assert not re.search(r"(?i)\b(?:https?|ftp|wss?|data|blob|file)://", html)
    assert not re.search(r"(?i)\b(?:src|href|action|srcset|poster)\s*=\s*\"(?!#)", html)
    assert not re.search(r"(?i)url\s*\(|@import|<link|<iframe|<img|<object|<embed", html)
    # Exactly one executable script, allowed by its hash; everything else is inert JSON.
    scripts = re.findall(r"<script([^>]*)>", html)
    assert sum(1 for a in scripts if "application/json" not in a) == 1


def test_incomplete_subject_section_carries_no_outcome(incomplete_run: Path) -> None:
    html = render_html(load_run(incomplete_run))
    a, b = _section(html, "a"), _section(html, "b")
    assert 'class="subject publishable"' in a and "COMPLETED" in a and "data-st=" in a
    assert 'class="subject incomplete"' in b
    for word in ("COMPLETED", "FAILED", "data-st=", "s-COMPLETED", "graded", "tool calls\"",
                 "duplicate effect", "ended:", "subject exit", "wall", "scorecard"):  # fmt: skip
        assert word not in b, word
    for word in ("score", "rate", "rank", "percentile", "success", "completion"):
        assert word not in b.lower().replace("scorecard", ""), word
    # Its timelines hold fault evidence only.
    tl = json.loads(re.search(r'<script type="application/json" id="tl-\d+">(.*?)</script>',
                              b, re.S).group(1))  # fmt: skip
    labels = {ev[2] for atts in tl.values() for a in atts for ev in a["ev"]}
    assert "injected" in labels and "actuator receipt" in labels
    assert not {x for x in labels if x.startswith(("graded", "ended", "subject "))}
    assert not any(x.endswith("tool calls") for x in labels)
    # One square per registered cell, the never-run one shown as MISSING.
    rp = load_run(incomplete_run, timelines=False).protocol
    assert len(re.findall(r'<rect class="cell ', b)) == len(rp.slots)
    assert 'data-ev="MISSING"' in b and 'data-ev="INVALID_INJECTION"' in b


def test_flipping_an_incomplete_subjects_outcomes_changes_nothing(tmp_path: Path) -> None:
    # Same evidence of the faults, opposite outcomes for subject b: the reports differ in no
    # byte but hashes (the evidence root commits to the grades, so digests move; nothing else).
    reports = {}
    for outcome in ("completed", "failed", "duplicate"):
        run_dir = build_incomplete(tmp_path / outcome, b_outcome=outcome)
        reports[outcome] = HASH.sub("#", render_html(load_run(run_dir)))
    for other in ("failed", "duplicate"):
        a, b = reports["completed"], reports[other]
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        assert a == b, (
            other,
            None if at is None else (a[at - 200 : at + 200], b[at - 200 : at + 200]),
        )


def test_flipping_a_publishable_subjects_outcome_shows(tmp_path: Path) -> None:
    # The differential above is not vacuous: the same flip on a publishable subject shows.
    run_dir = build_incomplete(tmp_path / "x")
    html = render_html(load_run(run_dir))
    sc = json.loads((run_dir / "results/a/scorecard.json").read_text())
    assert f"{sc['overall']['completion']['completed']}/" in _section(html, "a")


def test_write_report_default_path(incomplete_run: Path) -> None:
    path = write_report(incomplete_run)
    assert path == incomplete_run / "results/report.html" and path.stat().st_size > 1000
