"""results/junit.xml: validated against the vendored Jenkins xUnit JUnit XSD (junit_xsd/)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import xmlschema

from runner.report import load_run, render_junit, write_junit
from tests.report.conftest import BUNDLE, ROOT, build_incomplete

XSD = Path(__file__).parent / "junit_xsd" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(XSD)


def _suites(data: bytes) -> dict[str, ET.Element]:
    return {s.get("name", "").split(".", 1)[1]: s for s in ET.fromstring(data)}


def test_bundle_one_testcase_per_cell_valid(schema: xmlschema.XMLSchema) -> None:
    data = render_junit(load_run(BUNDLE, timelines=False))
    schema.validate(data.decode())
    rp = load_run(BUNDLE, timelines=False).protocol
    suites = _suites(data)
    assert set(suites) == set(rp.identities.subject_config_hashes)
    for name, suite in suites.items():
        cases = suite.findall("testcase")
        assert len(cases) == len(rp.slots) == int(suite.get("tests", "-1"))
        assert len({c.findtext("system-out") for c in cases}) == len(cases)
        failed = [c for c in cases if c.find("failure") is not None]
        assert int(suite.get("failures", "-1")) == len(failed)
        # blind-retry and checkpoint duplicate the submit (their known weakness); the other two
        # never do, and every swe-lite cell completed.
        if name in ("blind-retry", "checkpoint"):
            assert failed and all("duplicate" in (c.find("failure").get("message") or "")
                                  for c in failed)  # fmt: skip
        else:
            assert not failed


def test_incomplete_subject_is_one_failing_case_without_outcomes(
    incomplete_run: Path, schema: xmlschema.XMLSchema
) -> None:
    path = write_junit(incomplete_run)
    assert path == incomplete_run / "results/junit.xml"
    data = path.read_bytes()
    schema.validate(data.decode())
    suites = _suites(data)
    b = suites["b"]
    (case,) = b.findall("testcase")
    assert case.get("name") == "evidence incomplete"
    failure = case.find("failure")
    assert failure is not None and "invalid_injection" in (failure.get("message") or "")
    text = ET.tostring(b, encoding="unicode")
    for word in ("COMPLETED", "FAILED", "duplicate", "time="):
        assert word not in text, word
    assert (b.get("tests"), b.get("failures"), b.get("skipped")) == ("1", "1", "0")
    assert len(suites["a"].findall("testcase")) == 20


def test_incomplete_junit_does_not_depend_on_outcomes(tmp_path: Path) -> None:
    def b_suite(outcome: str) -> bytes:
        run = build_incomplete(tmp_path / outcome, b_outcome=outcome)
        b = _suites(render_junit(load_run(run, timelines=False)))["b"]
        for p in b.iter("property"):  # the proof hash commits to the grades
            p.set("value", "#")
        return ET.tostring(b)

    assert b_suite("completed") == b_suite("failed")


def test_non_run_cell_is_skipped(incomplete_run: Path, schema: xmlschema.XMLSchema) -> None:
    # A publishable subject cannot hold a SCENARIO_MISMATCH cell today (it blocks eligibility),
    # so the case is built on a loaded view: the JUnit writer must still mark it skipped.
    view = load_run(incomplete_run, timelines=False)
    a = next(s for s in view.subjects if s.subject_id == "a")
    a.cells[0] = dataclasses.replace(a.cells[0], status="SCENARIO_MISMATCH")
    data = render_junit(view)
    schema.validate(data.decode())
    suite = _suites(data)["a"]
    skipped = [c for c in suite.findall("testcase") if c.find("skipped") is not None]
    assert len(skipped) == 1 and suite.get("skipped") == "1"
    assert skipped[0].findtext("system-out") == a.cells[0].cell_id


def test_xsd_rejects_a_malformed_report(schema: xmlschema.XMLSchema) -> None:
    # The schema really constrains: a testcase without its required name does not validate.
    bad = b'<testsuites><testsuite tests="1"><testcase classname="x"/></testsuite></testsuites>'
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(bad.decode())


AGENTS_BUNDLE = ROOT / "vectors/published/swe-lite-agents-20261201T225113Z-e4c56d"


def _case_keys(data: bytes) -> list[tuple[str, str, str]]:
    return [
        (suite.get("name", ""), c.get("classname", ""), c.get("name", ""))
        for suite in ET.fromstring(data)
        for c in suite.findall("testcase")
    ]


def test_case_names_are_unique_per_cell_even_for_two_faults_of_one_kind(
    schema: xmlschema.XMLSchema,
) -> None:
    """swe-lite-agents declares two lost_response faults (the model's and the submit's) and two
    of each other kind: named by kind alone, their cases collided; CI keys history by name."""
    view = load_run(AGENTS_BUNDLE, timelines=False)
    kinds = [s.schedule.kind for s in view.protocol.slots if s.schedule.fault_id != "none"]
    assert len(set(kinds)) < len({s.schedule.fault_id for s in view.protocol.slots}) - 1
    data = render_junit(view)
    schema.validate(data.decode())
    keys = _case_keys(data)
    assert len(keys) == len(view.protocol.slots) * len(view.subjects)
    assert len(set(keys)) == len(keys), [k for k in keys if keys.count(k) > 1][:4]
    names = {k[2] for k in keys}
    assert any("lost-model-response (lost_response)" in n for n in names)
    assert any("lost-submit-response (lost_response)" in n for n in names)


def test_cells_sharing_a_name_are_told_apart_by_their_cell_id(incomplete_run: Path) -> None:
    """Should two cells of a subject ever get one name (here: a second cell of one slot, as a
    replicate dimension would make), the cell id prefix tells them apart."""
    view = load_run(incomplete_run, timelines=False)
    i, a = next((i, s) for i, s in enumerate(view.subjects) if s.publishable)
    twin = dataclasses.replace(a.cells[0], cell_id="sha256:" + "f" * 64)
    view.subjects[i] = dataclasses.replace(a, cells=[*a.cells, twin])
    keys = _case_keys(render_junit(view))
    assert len(set(keys)) == len(keys)
    assert sum(" cell " in k[2] for k in keys) == 2
