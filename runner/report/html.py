"""One self-contained HTML file: Jinja2, inline SVG and a little plain JS, no network.

Deterministic: the same run directory gives the same bytes (no clock, no absolute path), so
`bench report` re-derives it exactly. A Content-Security-Policy meta tag allows nothing to be
fetched (`default-src 'none'`); the one style and one script are allowed by their SHA-256.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from runner.evaluator.protocol.matrix import Slot
from runner.evaluator.publish.diagnostics import LaunchDiagnostic, last_line

from .load import CellView, RunView, SubjectView, column_of
from .timeline import LANES, embed_json

TEMPLATES = Path(__file__).parent / "templates"
PAGE_ROWS = 50  # tasks per heatmap page; a large matrix stays usable as pages
STATUSES = ("COMPLETED", "FAILED", "SUBJECT_PRE_TRIGGER_FAILURE", "SCENARIO_MISMATCH",
            "INVALID_INJECTION", "HARNESS_INVALID")  # fmt: skip
EVIDENCE_STATES = ("SUBJECT_OUTCOME_SEALED", "SCENARIO_MISMATCH", "INVALID_INJECTION",
                   "HARNESS_INVALID", "MISSING")  # fmt: skip


@dataclass
class Square:
    id: str
    seed: int
    cls: str
    title: str
    st: str | None = None
    ev: str | None = None
    dup: bool = False


@dataclass
class Group:
    kind: str
    cells: list[Square]
    frac: str | None


def _square(c: CellView, publishable: bool) -> Square:
    sched = c.slot.schedule
    fault = sched.kind if sched.fault_id == sched.kind else f"{sched.fault_id} ({sched.kind})"
    head = f"{c.slot.task_id} · {fault} · seed {c.slot.seed}"
    if publishable:
        st = c.status or "none"
        dup = c.duplicate_effects > 0
        extra = f" · {c.duplicate_effects} duplicate effect(s)" if dup else ""
        reasons = f" · {', '.join(c.reasons)}" if c.reasons else ""
        return Square(c.cell_id, c.slot.seed, f"s-{st}", f"{head} · {st}{extra}{reasons}",
                      st=st, dup=dup)  # fmt: skip
    ev = c.evidence_state or "MISSING"
    return Square(c.cell_id, c.slot.seed, f"e-{ev}", f"{head} · evidence: {ev}", ev=ev)


def _grid(
    s: SubjectView, tasks: list[str], kinds: list[str], col: Callable[[Slot], str]
) -> dict[str, Any]:
    at: dict[tuple[str, str], list[CellView]] = {}
    for c in s.cells:
        at.setdefault((c.slot.task_id, col(c.slot)), []).append(c)
    rows = []
    for task in tasks:
        groups = []
        for kind in kinds:
            cells = sorted(at.get((task, kind), []), key=lambda c: (c.slot.seed, c.cell_id))
            frac = None
            if s.publishable and cells:
                ok = sum(1 for c in cells if c.status == "COMPLETED" and not c.duplicate_effects)
                frac = f"{ok}/{len(cells)}"
            groups.append(Group(kind, [_square(c, s.publishable) for c in cells], frac))
        rows.append((task, groups))
    pages = [rows[i : i + PAGE_ROWS] for i in range(0, len(rows), PAGE_ROWS)] or [[]]
    return {"pages": pages}


def _timelines(s: SubjectView) -> Markup:
    # The subject's cells' timeline texts joined into one JSON object, in cell-id order.
    parts = sorted((c.cell_id, c.timeline.json) for c in s.cells if c.timeline is not None)
    return Markup("{" + ",".join(f'"{cid}":{text}' for cid, text in parts) + "}")


def _measures(s: SubjectView) -> list[tuple[str, Any]]:
    doc = s.document
    return [("overall", doc["overall"]), *sorted(doc.get("strata", {}).items())]


def _ci(i: Any) -> str:
    """An interval (publish/stats.Interval as JSON) as text; one-sided bounds say so."""
    if not isinstance(i, dict):
        return ""
    if i.get("method") == "clopper_pearson_upper":
        return f" [≤ {i['high']:.3f}]"
    return f" [{i['low']:.3f}, {i['high']:.3f}]"


def _rate(r: Any) -> str:
    if r is None:
        return "n/a"
    if isinstance(r, dict):
        return f"{r['numerator']}/{r['denominator']} ({r['value']}){_ci(r.get('interval'))}"
    return str(r)


def _last_line(launches: list[dict[str, Any]]) -> str:
    """A draft diagnostic's last output line (diagnostics.last_line, over the loaded dicts)."""
    return last_line([LaunchDiagnostic.model_validate(x) for x in launches])


def _num(v: Any) -> str:
    return "n/a" if v is None else str(v)


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def stream_html(view: RunView) -> Iterator[str]:
    """The report in pieces (a large run's report is never one string in memory)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    col = column_of(view.protocol)
    env.filters["rate"] = _rate
    env.filters["lastline"] = _last_line
    env.filters["num"] = _num
    env.filters["ci"] = _ci
    css = (TEMPLATES / "report.css").read_text()
    js = (TEMPLATES / "report.js").read_text()
    csp = (
        f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; "
        "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'"
    )
    return env.get_template("report.html.j2").generate(
        p=view.protocol,
        frozen=view.frozen,
        subjects=view.subjects,
        ncells=sum(len(s.cells) for s in view.subjects),
        kinds=view.kinds,
        measures=[_measures(s) if s.publishable else [] for s in view.subjects],
        grids=[_grid(s, view.tasks, view.kinds, col) for s in view.subjects],
        diagnostics=view.diagnostics,
        page_rows=PAGE_ROWS,
        statuses=STATUSES,
        evidence_states=EVIDENCE_STATES,
        comparison=view.comparison,
        timelines=_LazyList([functools.partial(_timelines, s) for s in view.subjects]),
        lanes=Markup(embed_json(list(LANES))),
        css=Markup(css),
        js=Markup(js),
        csp=Markup(csp),
    )


def render_html(view: RunView) -> str:
    return "".join(stream_html(view))


class _LazyList:
    """Item i computed when the template reaches it: one subject's timeline text at a time."""

    def __init__(self, makers: list[Callable[[], Markup]]) -> None:
        self.makers = makers

    def __getitem__(self, i: int) -> Markup:
        return self.makers[i]()
