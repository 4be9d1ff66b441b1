from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from runner.runtime.host import naming
from runner.runtime.host.netns import AttemptNetwork
from runner.runtime.host.procs import (
    ExitStatus,
    Reaper,
    SubjectLauncher,
    process_identity,
)

pytestmark = pytest.mark.runtime


def test_sigkill_status_is_signal_9(run_id: str, reaper: Reaper, tmp_run_dir: Path) -> None:
    s = SubjectLauncher(run_id, reaper).launch(["sleep", "1000"], state_dir=tmp_run_dir / "s")
    assert s.identity == process_identity(s.pid)  # identity recorded before the signal
    s.kill(signal.SIGKILL)
    st = s.wait(10)
    assert st.signaled and st.term_signal == 9 and not st.exited and st.exit_code is None
    assert os.WIFSIGNALED(st.raw_status) and os.WTERMSIG(st.raw_status) == 9
    with pytest.raises(ProcessLookupError):
        s.kill(signal.SIGKILL)  # reaped: the pidfd can never hit a recycled pid
    s.close()


def test_normal_exit_code(run_id: str, reaper: Reaper, tmp_run_dir: Path) -> None:
    launcher = SubjectLauncher(run_id, reaper)
    s = launcher.launch(["sh", "-c", "echo hi; echo oops >&2; exit 7"], state_dir=tmp_run_dir)
    st = s.wait(10)
    assert (st.exited, st.exit_code, st.signaled) == (True, 7, False)
    assert st == s.status
    assert (tmp_run_dir / "stdout.log").read_text() == "hi\n"
    assert (tmp_run_dir / "stderr.log").read_text() == "oops\n"
    assert launcher.launch(["true"], state_dir=tmp_run_dir).wait(10).exit_code == 0


def test_exit_status_decoding() -> None:
    assert ExitStatus.from_raw(1, 0x0700).exit_code == 7
    st = ExitStatus.from_raw(1, 0x0086)  # core-dump flag 0x80 | SIGABRT (6)
    assert st.signaled and st.term_signal == 6 and st.core_dumped


def test_launch_in_netns_pid_is_the_target(run_id: str, reaper: Reaper, tmp_run_dir: Path) -> None:
    with AttemptNetwork(run_id) as net:
        s = SubjectLauncher(run_id, reaper).launch(
            ["sleep", "1000"], state_dir=tmp_run_dir, netns=net.netns, env={"FOO": "bar"}
        )
        try:
            # ip and env exec in place: wait (bounded) until the pid shows the final program.
            deadline = time.monotonic() + 10
            while psutil.Process(s.pid).cmdline() != ["sleep", "1000"]:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            p = psutil.Process(s.pid)
            assert p.ppid() == os.getpid()  # our direct child, so our reaper owns it
            assert (
                os.stat(f"/proc/{s.pid}/ns/net").st_ino
                == os.stat(f"/var/run/netns/{net.netns}").st_ino
            )
            assert p.cwd() == str(tmp_run_dir)
            env = p.environ()
            assert env[naming.ENV_RUN] == run_id and env["FOO"] == "bar"
            assert env["AFB_STATE_DIR"] == str(tmp_run_dir)
            assert "HOSTNAME" not in env or env["HOSTNAME"] == os.environ.get("HOSTNAME")
            # start time is unchanged by the execs
            assert process_identity(s.pid) == s.identity
            assert (tmp_run_dir / "subject.pid").read_text().split() == [
                str(s.pid),
                s.identity.start_time,
            ]
            assert os.getsid(s.pid) == s.pid  # own session
        finally:
            s.kill(signal.SIGKILL)
            assert s.wait(10).term_signal == 9
            s.close()


def test_reaper_does_not_steal_other_children(
    run_id: str, reaper: Reaper, tmp_run_dir: Path
) -> None:
    s = SubjectLauncher(run_id, reaper).launch(["sleep", "1000"], state_dir=tmp_run_dir)
    try:
        # subprocess.run's own waitpid must still see real exit codes while the reaper runs.
        for code in (0, 3, 5):
            assert subprocess.run(["sh", "-c", f"exit {code}"]).returncode == code
    finally:
        s.kill()
        s.wait(10)
        s.close()
