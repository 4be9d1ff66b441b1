"""The report in a real headless Chromium (Debian chromium + chromium-driver, driven by selenium).

Without chromium these tests skip with the reason; under AFB_REQUIRE_REAL=1 (CI) they fail.
Screenshots are saved under each test's tmp dir.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.report import write_report
from tests.report.conftest import BUNDLE

pytestmark = pytest.mark.browser

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1000")  # fmt: skip
PROBE_FETCH = """
var done = arguments[arguments.length - 1];
document.addEventListener("securitypolicyviolation", function (e) { done(e.effectiveDirective); });
var img = document.createElement("img");
img.src = "http://127.0.0.1:9/afb-probe.png";
document.body.appendChild(img);
setTimeout(function () { done("not blocked"); }, 3000);
"""
LIFECYCLE = ["scheduled", "armed", "injected", "witnessed", "recovered", "released"]


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (uv sync --frozen)"
    if not any(shutil.which(b) for b in CHROMIUM):
        return "chromium not installed (apt-get install chromium chromium-driver; scripts/setup.sh)"
    if not shutil.which("chromedriver"):
        return "chromedriver not installed (apt-get install chromium-driver; scripts/setup.sh)"
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[object]:
    reason = _missing()
    if reason:
        if os.environ.get("AFB_REQUIRE_REAL") == "1":
            pytest.fail(f"AFB_REQUIRE_REAL=1 and the browser is missing: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # never let selenium-manager download a driver
    profile = tempfile.mkdtemp(prefix="afb-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = next(p for b in CHROMIUM if (p := shutil.which(b)))
    for f in (*FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(f)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(
        options=opts, service=Service(executable_path=shutil.which("chromedriver"))
    )
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _load(driver, path: Path) -> None:
    driver.get_log("browser")  # drop anything earlier
    driver.get(path.as_uri())


def _console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _no_requests(driver) -> None:
    resources = driver.execute_script("return performance.getEntriesByType('resource').length")
    assert resources == 0


def _lifecycle(driver) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", "#timeline svg .lc")]


def _in_order(states: list[str]) -> bool:
    idx = [LIFECYCLE.index(s) for s in states]
    return idx == sorted(idx)


def test_bundle_report_in_chromium(driver, tmp_path: Path) -> None:
    out = write_report(BUNDLE, tmp_path / "report.html")
    _load(driver, out)
    assert driver.title.startswith("agent-fault-bench report: swe-lite")
    sections = driver.find_elements("css selector", "section.subject.publishable")
    assert len(sections) == 4
    for sec in sections:
        registered = int(sec.find_element("css selector", "table.heat").get_attribute("data-cells"))
        assert registered == 40
        assert len(sec.find_elements("css selector", "rect.cell")) == registered
    driver.save_screenshot(str(tmp_path / "bundle-top.png"))
    # A lost response on checkpoint: its submit is duplicated, the fault witnessed, then released.
    sec = next(s for s in sections if s.get_attribute("data-subject") == "checkpoint")
    cell = sec.find_element("css selector", 'rect.cell[data-kind="lost_response"]')
    cell.click()
    panel = driver.find_element("id", "timeline")
    assert panel.is_displayed()
    states = _lifecycle(driver)
    assert states[:3] == ["scheduled", "armed", "injected"] and "witnessed" in states
    assert _in_order(states), states
    assert panel.find_elements("css selector", "svg rect.win")  # the fault window is shaded
    assert panel.find_elements("css selector", "tr.dup")  # the duplicate submit is flagged
    sbs = panel.find_element("css selector", ".sbs").text
    assert "actuator receipt" in sbs and "witness: destination_ledger" in sbs and "sha256:" in sbs
    driver.execute_script("arguments[0].scrollIntoView()", panel)
    driver.save_screenshot(str(tmp_path / "bundle-timeline.png"))
    # Every faulted cell's lifecycle is in order.
    for c in sec.find_elements("css selector", "rect.cell:not([data-kind='none'])"):
        c.click()
        assert _in_order(_lifecycle(driver)), c.get_attribute("data-cell")
    assert _console_errors(driver) == []
    _no_requests(driver)
    # Neither check is vacuous: a console error is seen, and the CSP refuses a fetch.
    driver.execute_script("console.error('afb-probe')")
    assert any("afb-probe" in e["message"] for e in _console_errors(driver))
    blocked = driver.execute_async_script(PROBE_FETCH)
    assert blocked == "img-src", blocked


def test_incomplete_report_in_chromium(driver, incomplete_run: Path, tmp_path: Path) -> None:
    out = write_report(incomplete_run, tmp_path / "report.html")
    _load(driver, out)
    inc = driver.find_element("css selector", "section.subject.incomplete")
    assert inc.get_attribute("data-subject") == "b"
    text = inc.text
    for word in ("COMPLETED", "FAILED", "rate", "score", "completion", "duplicate"):
        assert word not in text, word
    assert not inc.find_elements("css selector", "[data-st], [class*='s-']")
    cells = inc.find_elements("css selector", "rect.cell")
    assert len(cells) == int(
        inc.find_element("css selector", "table.heat").get_attribute("data-cells")
    )
    driver.save_screenshot(str(tmp_path / "incomplete-top.png"))
    sealed = inc.find_element(
        "css selector", 'rect.cell[data-ev="SUBJECT_OUTCOME_SEALED"]:not([data-kind="none"])'
    )
    sealed.click()
    panel = driver.find_element("id", "timeline")
    assert _in_order(_lifecycle(driver)) and "witnessed" in _lifecycle(driver)
    for word in ("graded", "ended:", "completed", "COMPLETED", "FAILED", "subject exit"):
        assert word not in panel.text, word
    assert not re.search(r"\d+ tool calls", panel.text)
    driver.execute_script("arguments[0].scrollIntoView()", inc)
    driver.save_screenshot(str(tmp_path / "incomplete-section.png"))
    invalid = inc.find_element("css selector", 'rect.cell[data-ev="INVALID_INJECTION"]')
    invalid.click()
    # The no-op injector's runtime lifecycle says witnessed; the evaluator's judgment says not.
    assert "evaluator: INVALID_INJECTION: witness:" in panel.text
    assert _console_errors(driver) == []
    _no_requests(driver)
