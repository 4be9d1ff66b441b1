"""JUnit XML for CI: one testcase per cell of a publishable subject, one for an incomplete one.

- publishable: a cell passes when it COMPLETED with no duplicate effect; any other terminal
  status, or a duplicate effect, is a failure naming it; a SCENARIO_MISMATCH cell (its trigger
  was never reached, so the registered scenario did not run) is skipped;
- not publishable: a single failing testcase "evidence incomplete" with the reason codes and no
  per-cell outcome (the publication boundary holds here too).

Deterministic (no timestamp, no hostname); `time` is the cell's recorded wall time.

A testcase's name is unique in its suite (CI keys history by classname + name): task, fault id
(two faults of one kind, e.g. a lost model response and a lost submit response, are two cases),
fault kind and seed, which is what tells a subject's cells apart; should two cells still share
one (a matrix dimension added later), each of them gets its cell id's prefix.
"""

from __future__ import annotations

from collections import Counter
from xml.etree import ElementTree as ET

from runner.evaluator.protocol.faultkinds import NO_FAULT

from .load import CellView, RunView, SubjectView

SKIPPED_STATUSES = frozenset({"SCENARIO_MISMATCH"})


def _suite(s: SubjectView, root: ET.Element, protocol_id: str) -> None:
    suite = ET.SubElement(root, "testsuite", name=f"{protocol_id}.{s.subject_id}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="subject_config_hash", value=s.config_hash)
    ET.SubElement(props, "property", name="proof_hash", value=str(s.proof.get("proof_hash", "")))
    failures = skipped = 0
    if not s.publishable:
        case = ET.SubElement(suite, "testcase", name="evidence incomplete",
                             classname=f"{protocol_id}.{s.subject_id}")  # fmt: skip
        codes = s.reason_codes
        f = ET.SubElement(case, "failure", type="evidence_incomplete",
                          message="not publishable: " + ", ".join(codes))  # fmt: skip
        f.text = "\n".join(codes)
        suite.set("tests", "1")
        suite.set("failures", "1")
        suite.set("errors", "0")
        suite.set("skipped", "0")
        return
    cells = sorted(
        s.cells, key=lambda c: (c.slot.task_id, c.slot.schedule.fault_id, c.slot.seed, c.cell_id)
    )
    shared = Counter(case_name(c) for c in cells)
    for c in cells:
        sl = c.slot
        name = case_name(c)
        if shared[name] > 1:
            name += f" cell {c.cell_id[7:23]}"
        case = ET.SubElement(
            suite, "testcase", name=name,
            classname=f"{protocol_id}.{s.subject_id}.{sl.schedule.kind}",
        )  # fmt: skip
        if c.wall_ns is not None:
            case.set("time", f"{c.wall_ns / 1e9:.3f}")
        ET.SubElement(case, "system-out").text = c.cell_id
        status = c.status or "MISSING"
        if status in SKIPPED_STATUSES:
            skipped += 1
            ET.SubElement(case, "skipped", message=f"{status}: the scenario did not run")
        elif status != "COMPLETED" or c.duplicate_effects:
            failures += 1
            why = status if status != "COMPLETED" else f"{c.duplicate_effects} duplicate effect(s)"
            f = ET.SubElement(case, "failure", type=status, message=why)
            f.text = "\n".join(c.reasons) or why
    suite.set("tests", str(len(cells)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))


def case_name(c: CellView) -> str:
    sl = c.slot
    fault = sl.schedule.fault_id
    what = "baseline" if fault == NO_FAULT else f"{fault} ({sl.schedule.kind})"
    return f"{sl.task_id} [{what}, seed {sl.seed}]"


def render_junit(view: RunView) -> bytes:
    pid = view.protocol.identities.protocol_id
    root = ET.Element("testsuites", name=f"agent-fault-bench {pid} run {view.protocol.run_id}")
    for s in view.subjects:
        _suite(s, root, pid)
    root.set("tests", str(sum(int(x.get("tests", "0")) for x in root)))
    root.set("failures", str(sum(int(x.get("failures", "0")) for x in root)))
    root.set("errors", "0")
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"
