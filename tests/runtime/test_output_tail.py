"""The output tail a launch's `subject_exit` journals: bounded, from the launch's own start, and
never another file than the runtime's own log (the subject may rearrange its state directory)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.evidence.records import OUTPUT_TAIL_BYTES, OUTPUT_TAIL_LINES
from runner.runtime.attempt.output import LaunchOutput, tail


def test_a_launch_sees_only_what_it_wrote(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_text("first launch died\n")
    mark = LaunchOutput.mark(tmp_path)
    with log.open("a") as fh:
        fh.write("second launch: boom\n")
    assert mark.tails() == {"stdout_tail": None, "stderr_tail": "second launch: boom"}
    # nothing written since its start: empty, not the earlier launch's lines
    again = LaunchOutput.mark(tmp_path)
    assert again.tails()["stderr_tail"] == ""


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=400), max_size=60))
def test_bounded_whole_last_lines(lines: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "x.log"
        log.write_bytes("".join(f"{ln}\n" for ln in lines).encode("utf-8", "surrogatepass"))
        got = tail(log)
        assert got is not None
        assert len(got) <= OUTPUT_TAIL_BYTES and len(got.splitlines()) <= OUTPUT_TAIL_LINES
        if lines and len(log.read_bytes()) <= OUTPUT_TAIL_BYTES:
            want = "\n".join("".join(f"{ln}\n" for ln in lines).splitlines()[-OUTPUT_TAIL_LINES:])
            assert got == want


def test_never_another_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    (tmp_path / "s").mkdir()
    link = tmp_path / "s" / "stderr.log"
    link.symlink_to(secret)  # a symlink is not followed
    assert tail(link) is None
    link.unlink()
    os.link(secret, link)  # a second link to another file is not read either
    assert tail(link) is None
    link.unlink()
    os.mkfifo(link)  # a FIFO does not block the runtime
    assert tail(link) is None
    link.unlink()
    link.write_text("mine\n")
    if os.geteuid() == 0:
        os.chown(link, 65534, 65534)  # a file the subject made itself
        assert tail(link) is None
