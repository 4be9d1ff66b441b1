"""Time to give up (issue 28 item 5): how long each subject framework keeps trying while the model
path, or the irreversible tool `submit_patch`, stays partitioned, bounded by its limit.

    .venv/bin/python tests/perf/give_up.py [--limit 120] [--jobs 2] [--subjects a,b]
                                           [--faults f,g] [--out DIR]
    .venv/bin/python tests/perf/give_up.py --run-dir RUN_DIR   # only read an existing run

One draft `bench run` (one task, no baseline, one attempt a cell) of these subjects, each with
`limits.timeout_s = --limit`: mini-swe-agent, the OpenAI Agents SDK (its MCP retry 0 and 3),
Claude Code, Codex CLI with its own retries at 0 (as tests/subjects/test_codex.py) and with
Codex's defaults; x two faults, the longest partition a spec can declare
(`network_partition`, `release_after_blocked_attempts = 100`):

  partition-model-100    trigger { tool = "model", ordinal = 2, phase = "received" }
  partition-submit-100   trigger { tool = "submit_patch", ordinal = 1, phase = "received" }

Read from the attempt journals only (each envelope's `at_ns`, never the subject's own account):
  give-up s   last `subject_exit` at_ns - the fault's `lifecycle injected` at_ns
  held s      `lifecycle released` at_ns - `lifecycle injected` at_ns: how long the drop rule
              stayed: released at 100 dropped packets or by the runtime's bounded release wait
              (NetworkPartitionFault.release_wait, 30 s), whichever comes first
  next s      the subject's first model or tool call after the injection; `*` when it came
              within GATE_S of the release: the trigger engine holds every new call until a
              fired fault is witnessed and settled (a partition settles at its release), so
              such a call was held by the harness, not sent late by the subject
  rule pkts   the drop rule's packet counter when the witness was read (`rule_state`
              observation, counter_packets_after), i.e. before the subject's retries; the count
              at release is not journaled
  exit        the last launch's exit code (or its signal)
  verdict     `did not give up within N s`: a `harness_error` record of stage `subject_timeout`
              (the runner killed the subject at its limit, N s after its launch; the attempt
              ends `harness_error`); `gave up`: it exited
              non-zero by itself; `exit 0, not completed`: it exited 0 without the task done
              (it reported failure or gave up quietly); `rode it out`: it exited 0 with the task
              completed (the partition was released before it gave up); `trigger not reached`.

Prints a table; asserts nothing. Needs the runtime (root, Podman) and the pinned Claude Code and
Codex binaries (scripts/setup-claude-code.sh, scripts/setup-codex.sh).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.evaluator.evidence.journal import read_journal  # noqa: E402
from tests.subjects import test_claude_code, test_codex, test_openai_agents  # noqa: E402
from tests.subjects.agents import (  # noqa: E402
    make_spec,
    run_draft,
    scripted_tables,
    subject_block,
)

FAULTS = {
    "partition-model-100": '{ tool = "model", ordinal = 2, phase = "received" }',
    "partition-submit-100": '{ tool = "submit_patch", ordinal = 1, phase = "received" }',
}
SUBJECTS = (
    "mini-swe-agent",
    "openai-agents-retry0",
    "openai-agents-retry3",
    "claude-code",
    "codex-retry0",
    "codex-defaults",
)
# The trigger engine holds every newly received call (model or tool) until a fired fault is
# witnessed and settled; a partition settles at its release. A call that arrives within this
# long after the release was most likely held by that gate, not sent late by the subject.
GATE_S = 0.25
CODEX_RETRIES = (
    "model_providers.afb.request_max_retries",
    "model_providers.afb.stream_max_retries",
)


def fault_text(chosen: list[str]) -> str:
    return "".join(
        f'[[faults]]\nid = "{fid}"\nkind = "network_partition"\ntrigger = {FAULTS[fid]}\n'
        "parameters = { release_after_blocked_attempts = 100 }\n\n"
        for fid in chosen
    )


def with_limit(block: str, limit: float) -> str:
    """A subject block whose `timeout_s` is `limit` (every block here declares one)."""
    lines = block.splitlines()
    hits = [i for i, ln in enumerate(lines) if ln.startswith("timeout_s = ")]
    assert len(hits) == 1, block
    lines[hits[0]] = f"timeout_s = {limit:.1f}"
    return "\n".join(lines) + "\n"


def codex_blocks(spec_dir: Path) -> dict[str, str]:
    """Codex with its retries at 0 (test_codex.py's subject) and with its own defaults."""
    retry0 = test_codex.subject(spec_dir).replace('id = "codex"', 'id = "codex-retry0"', 1)
    flags: list[str] = []
    it = iter(test_codex.FLAGS)
    for a in it:
        if a == "-c":
            kv = next(it)
            if kv.split("=", 1)[0] in CODEX_RETRIES:
                continue
            flags += [a, kv]
        else:
            flags.append(a)
    assert len(flags) == len(test_codex.FLAGS) - 4
    script = test_codex.WRAPPER.read_text()
    argv = ["/bin/sh", "-c", script, "codex-subject", str(test_codex.CODEX), *flags]
    defaults = f"""
[[subjects]]
id = "codex-defaults"
agent = "command:codex"

[subjects.config]
argv = {json.dumps(argv)}
mcp = true
{scripted_tables("codex", spec_dir / "codex" / "cassettes")}"""
    return {"codex-retry0": retry0, "codex-defaults": defaults}


def subject_blocks(spec_dir: Path, chosen: list[str], limit: float) -> str:
    blocks: dict[str, str] = {}
    if "mini-swe-agent" in chosen:
        blocks["mini-swe-agent"] = subject_block("mini-swe-agent")
    if {"openai-agents-retry0", "openai-agents-retry3"} & set(chosen):
        both = test_openai_agents.subjects(spec_dir)
        for part in both.split("\n[[subjects]]")[1:]:
            sid = part.split('id = "', 1)[1].split('"', 1)[0]
            blocks[sid] = "\n[[subjects]]" + part
    if "claude-code" in chosen:
        assert test_claude_code.CLAUDE.is_file(), f"{test_claude_code.CLAUDE} is missing"
        blocks["claude-code"] = test_claude_code.subject(spec_dir)
    if {"codex-retry0", "codex-defaults"} & set(chosen):
        assert test_codex.CODEX.is_file(), f"{test_codex.CODEX} is missing"
        blocks.update(codex_blocks(spec_dir))
    return "".join(with_limit(blocks[s], limit) for s in chosen)


def build_spec(tmp: Path, chosen: list[str], faults: list[str], limit: float) -> Path:
    spec_dir = tmp / "spec"
    spec_dir.mkdir(parents=True)
    spec = make_spec(tmp, subject_blocks(spec_dir, chosen, limit), fault_text(faults))
    text = spec.read_text()
    for old, new in (("baseline = true", "baseline = false"), ("cap = 2", "cap = 1")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    spec.write_text(text)
    return spec


# --- reading the evidence ---------------------------------------------------------------------


def cells(run_dir: Path) -> list[dict[str, Any]]:
    """One row per attempt, from its journal's records and their at_ns."""
    rows = []
    for path in sorted((run_dir / "journals").glob("*-a*.jsonl")):
        entries = [(int(e.at_ns), e.record.model_dump(mode="json")) for e in read_journal(path)]
        by_type: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for at, r in entries:
            by_type.setdefault(r["type"], []).append((at, r))
        (start,) = by_type["attempt_started"]
        life = {r["state"]: at for at, r in by_type.get("lifecycle", [])}
        exits = by_type.get("subject_exit", [])
        ended = by_type.get("attempt_ended", [(0, {})])[-1][1]
        calls = by_type.get("tool_calls", [(0, {"by_tool": {}})])[-1][1]["by_tool"]
        grade = by_type.get("grader_result", [(0, {})])[-1][1]
        dropped = None
        for _, r in by_type.get("witness_observation", []):
            if r["name"] == "rule_state":
                dropped = r["observation"].get("counter_packets_after")
        row: dict[str, Any] = {
            "subject": start[1]["subject_id"],
            "fault": start[1]["fault_id"],
            "outcome": ended.get("outcome", "?"),
            "detail": ended.get("detail", ""),
            "launches": len(exits),
            "calls": calls,
            "completed": grade.get("completed"),
            "effects": grade.get("committed_effects"),
            "dropped": dropped,
            "states": [r["state"] for _, r in by_type.get("lifecycle", [])],
            "errors": [r["stage"] for _, r in by_type.get("harness_error", [])],
        }
        inj = life.get("injected")
        if exits:
            at, last = exits[-1]
            row["exit"] = (
                f"sig {last['term_signal']}" if last["signaled"] else str(last["exit_code"])
            )
            row["tail"] = (last.get("stderr_tail") or "")[-300:] + (last.get("stdout_tail") or "")[
                -300:
            ]
            if inj is not None:
                row["give_up_s"] = (at - inj) / 1e9
        if inj is not None and "released" in life:
            row["held_s"] = (life["released"] - inj) / 1e9
        calls_after = [
            at
            for at, r in entries
            if r["type"] in ("model_exchange", "effect_call") and inj is not None and at > inj
        ]
        if calls_after:
            row["resumed_s"] = (calls_after[0] - inj) / 1e9
            if "held_s" in row:  # its next call arrived as the rule went: held by the gate?
                row["gated"] = 0 <= row["resumed_s"] - row["held_s"] < GATE_S
        rows.append(row)
    return rows


def verdict(row: dict[str, Any], limit: float | None) -> str:
    if row["outcome"] == "trigger_not_reached" or "injected" not in row["states"]:
        return "trigger not reached"
    if "subject_timeout" in row["errors"]:  # the runner killed it at its limit
        return f"did not give up within {limit:g} s" if limit else "did not give up (limit)"
    if row["outcome"] not in ("subject_finished", "subject_gave_up"):
        return f"{row['outcome']}: {row['detail'][:60]}"
    if row.get("exit") != "0":
        return f"gave up (exit {row.get('exit')})"
    return "rode it out (completed)" if row["completed"] else "exit 0, not completed"


def limit_of(run_dir: Path) -> float | None:
    """The subjects' timeout_s in the run's own copy of its spec (protocol.json's spec_text),
    when they all agree."""
    import tomllib

    try:
        text = json.loads((run_dir / "protocol.json").read_text())["spec_text"]
        subjects = tomllib.loads(text).get("subjects", [])
    except (OSError, KeyError, ValueError):
        return None
    limits = {s.get("config", {}).get("limits", {}).get("timeout_s") for s in subjects}
    return float(limits.pop()) if len(limits) == 1 and None not in limits else None


def report(run_dir: Path, limit: float | None) -> None:
    rows = cells(run_dir)
    limit = limit or limit_of(run_dir)
    order = {s: i for i, s in enumerate(SUBJECTS)}
    rows.sort(key=lambda r: (order.get(r["subject"], 99), r["subject"], r["fault"]))
    print(f"run {run_dir}  (subject limit {limit if limit else '?'} s)")
    head = ["subject", "fault", "give-up s", "held s", "next s", "rule pkts", "exit", "model"]
    head.append("effects")
    print(f"{head[0]:22} {head[1]:21} " + " ".join(f"{h:>9}" for h in head[2:]) + "  verdict")
    for r in rows:

        def f(v: Any, fmt: str = "{:.1f}") -> str:
            return "-" if v is None else fmt.format(v)

        print(
            f"{r['subject']:22} {r['fault']:21} {f(r.get('give_up_s')):>9} "
            f"{f(r.get('held_s')):>9} "
            f"{f(r.get('resumed_s')) + ('*' if r.get('gated') else ''):>9} "
            f"{f(r['dropped'], '{}'):>9} {r.get('exit', '-'):>9} "
            f"{f(r['calls'].get('model'), '{}'):>9} {f(r['effects'], '{}'):>9}  "
            f"{verdict(r, limit)}"
        )
    print(
        "\ngive-up s: last subject_exit - injected; held s: released - injected; next s: the"
        " subject's first model or tool call after the injection (- injected), * when it"
        f" arrived < {GATE_S} s after the release (held by the trigger engine's witness gate,"
        " not sent late by the subject); rule pkts: the drop rule's counter when witnessed."
    )
    print("\nlast output of each subject's last launch (stderr tail, stdout tail):")
    for r in rows:
        tail = " ".join(r.get("tail", "").split())[-240:]
        print(f"  {r['subject']} / {r['fault']}: {tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=120.0, help="subjects' timeout_s (s)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--out", type=Path, help="where the run directory goes (default: a tmp dir)")
    ap.add_argument("--run-dir", type=Path, help="only read this existing run")
    args = ap.parse_args()
    if args.run_dir:
        report(args.run_dir, None)
        return
    chosen = [s for s in args.subjects.split(",") if s]
    unknown = set(chosen) - set(SUBJECTS)
    if unknown:
        ap.error(f"unknown subjects {sorted(unknown)}; known: {', '.join(SUBJECTS)}")
    faults = [f for f in args.faults.split(",") if f]
    if set(faults) - set(FAULTS) or not faults:
        ap.error(f"faults: some of {', '.join(FAULTS)}")
    tmp = Path(tempfile.mkdtemp(prefix="afb-give-up-"))
    spec = build_spec(tmp, chosen, faults, args.limit)
    out = args.out or tmp / "out"
    t0 = time.monotonic()
    proc, run_dir = run_draft(spec, out, "--jobs", str(args.jobs))
    print(f"bench run --draft: exit {proc.returncode}, {time.monotonic() - t0:.0f} s wall")
    if proc.returncode not in (0, 3):
        print(proc.stdout[-3000:] + proc.stderr[-3000:])
    if not (run_dir / "journals").is_dir():
        sys.exit(f"no run directory under {out}")
    report(run_dir, args.limit)
    shutil.rmtree(tmp / "spec", ignore_errors=True)


if __name__ == "__main__":
    main()
