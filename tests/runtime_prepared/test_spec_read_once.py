"""The spec is read once (runner/runtime/prepared.py): `bench run` opens the spec file exactly
once, created or resumed; create, resume, a cluster worker and rerun use the prepared value and
never the file again; a run's witness contracts are its protocol.json's.

No root: the attempts are not run (`run_matrix` and the evaluation are replaced by recorders);
everything up to them (reading, parsing, identities, freeze state, protocol.json) is real. The
real RunServices side of the contracts is tests/runtime/test_run_contracts.py.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from runner.benchmarks.registry import workload_for
from runner.cli.main import app
from runner.evaluator.core.bounded import SPEC_CAP
from runner.evaluator.core.canonical import sha256_digest
from runner.evaluator.core.errors import InputError
from runner.evaluator.evidence.journal import read_journal
from runner.evaluator.evidence.records import RunStarted
from runner.evaluator.protocol.runfile import read_protocol
from runner.evaluator.protocol.specload import load_spec
from runner.runtime import prepared as prepared_mod
from runner.runtime.executor import MatrixRun
from runner.runtime.prepared import SpecSource, for_run, parse_spec, prepare
from tests.foundation.helpers import copy_example
from tests.foundation.test_errors import CASES, TEXT
from tests.hardening.fuzz import spec_texts

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "specs" / "swe-lite-smoke.toml"
TASK = "cachetools-cached-info"


def smoke_copy(tmp: Path) -> Path:
    """specs/swe-lite-smoke.toml beside its one task, in `tmp` (so the test may edit it)."""
    spec = tmp / "spec" / "smoke.toml"
    (spec.parent / "swe-lite").mkdir(parents=True)
    shutil.copytree(ROOT / "specs" / "swe-lite" / TASK, spec.parent / "swe-lite" / TASK)
    shutil.copy(ROOT / "specs" / "swe-lite" / "sources.toml", spec.parent / "swe-lite")
    shutil.copy(SMOKE, spec)
    return spec


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], list[str]]:
    """Every open of a file by path (os.open, io.open, builtins.open; pathlib goes through
    io.open), recorded; the fixture's value counts those of one path."""
    seen: list[str] = []

    def wrap(real: Any) -> Any:
        def opener(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, str | bytes | os.PathLike):
                seen.append(os.path.abspath(os.fsdecode(file)))
            return real(file, *args, **kwargs)

        return opener

    monkeypatch.setattr(os, "open", wrap(os.open))
    monkeypatch.setattr(io, "open", wrap(io.open))
    monkeypatch.setattr(builtins, "open", wrap(builtins.open))
    return lambda path: [p for p in seen if p == os.path.abspath(path)]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every TOML text parsed (tomllib.loads: load_spec, parse_spec, protocol.json's spec)."""
    import tomllib

    seen: list[str] = []
    real = tomllib.loads

    def loads(text: str, **kw: Any) -> Any:
        seen.append(text)
        return real(text, **kw)

    monkeypatch.setattr(tomllib, "loads", loads)
    return seen


@pytest.fixture
def no_attempts(monkeypatch: pytest.MonkeyPatch) -> list[MatrixRun]:
    """`run_matrix` records the run it was handed instead of running attempts (no root)."""
    import runner.orchestrate as orchestrate
    from runner.runtime import sweep

    handed: list[MatrixRun] = []

    def run_matrix(mrun: MatrixRun, *args: Any, **kwargs: Any) -> tuple[Path, None]:
        handed.append(mrun)
        mrun.record_start(None, None)
        return mrun.run_dir, None

    monkeypatch.setattr(orchestrate, "run_matrix", run_matrix)
    monkeypatch.setattr(orchestrate, "evaluate_and_write", lambda run_dir, log=None: {})
    monkeypatch.setattr(sweep, "sweep", lambda **kw: sweep.SweepReport())
    return handed


def bench_run(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, ["run", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


# ------------------------------------------------------------------------------ read once


def test_bench_run_opens_the_spec_once_created_and_resumed(
    tmp_path: Path,
    opens: Callable[[Path], list[str]],
    parses: list[str],
    no_attempts: list[MatrixRun],
) -> None:
    """Up to the evaluation (which reads protocol.json, the evidence, on its own): one open of
    the spec file and one parse of its text, for a new run and for a resumed one."""
    spec = smoke_copy(tmp_path)
    text = spec.read_text()
    out = tmp_path / "runs"
    copied = len(opens(spec))  # the copy's writes, the read just above
    bench_run(spec, "--draft", "--out", out, "--jobs", "1")
    assert len(opens(spec)) == copied + 1, opens(spec)
    assert parses.count(text) == 1
    (created,) = no_attempts
    rp = read_protocol(created.run_dir)
    assert rp.spec_text.encode() == spec.read_bytes()
    n = len(opens(spec))  # the read just above
    bench_run(spec, "--draft", "--out", out, "--jobs", "1", "--resume", created.run_dir)
    assert len(opens(spec)) == n + 1, opens(spec)
    assert parses.count(text) == 2
    assert no_attempts[1].run_dir == created.run_dir
    assert no_attempts[1].prepared.source.data == spec.read_bytes()


def test_the_count_would_see_a_second_read(
    tmp_path: Path, opens: Callable[[Path], list[str]]
) -> None:
    """The counter is not blind: load_spec then a plain read are two opens."""
    spec = smoke_copy(tmp_path)
    copied = len(opens(spec))
    load_spec(spec)
    spec.read_text()
    assert len(opens(spec)) == copied + 2


def test_create_takes_the_prepared_bytes_not_the_file(tmp_path: Path) -> None:
    """A spec edited after it was read is not the run's: protocol.json, run_started's digest
    and the identities are those of the bytes read once."""
    spec = smoke_copy(tmp_path)
    source = SpecSource.read(spec)
    prepared = prepare(source)
    spec.write_text(spec.read_text().replace("cap = 2", "cap = 3"))
    mrun = MatrixRun.create(prepared, tmp_path / "runs", "a1b2c3", True, workload_for(
        prepared.spec, spec))  # fmt: skip
    rp = read_protocol(mrun.run_dir)
    assert rp.spec_text.encode() == source.data != spec.read_bytes()
    assert rp.identities == prepared.identities
    mrun.record_start(None, None)
    (started,) = [e.record for e in read_journal(mrun.run_dir / "journals" / "run.jsonl")]
    assert isinstance(started, RunStarted) and started.spec_digest == source.digest
    # read again, the edited file is another protocol
    again = prepare(SpecSource.read(spec))
    assert again.identities.protocol_hash != prepared.identities.protocol_hash


def test_resume_uses_the_source_it_is_given(tmp_path: Path) -> None:
    spec = smoke_copy(tmp_path)
    source = SpecSource.read(spec)
    workload = workload_for(source.spec, spec)
    made = MatrixRun.create(prepare(source), tmp_path / "runs", "a1b2c3", True, workload)
    spec.write_text(spec.read_text().replace("cap = 2", "cap = 3"))
    resumed = MatrixRun.resume(source, made.run_dir, workload)  # the bytes read before the edit
    assert resumed.prepared.source is source
    with pytest.raises(InputError, match="continues only under its own protocol"):
        MatrixRun.resume(SpecSource.read(spec), made.run_dir, workload)


def test_a_worker_uses_the_prepared_value(
    tmp_path: Path, opens: Callable[[Path], list[str]]
) -> None:
    from runner.scale.cluster_bundle import AttemptRequest
    from runner.scale.worker_runtime import _same_spec

    spec = smoke_copy(tmp_path)
    source = SpecSource.read(spec)
    prepared = prepare(source, freeze=False)
    before = len(opens(spec))
    mrun = MatrixRun.for_worker(prepared, tmp_path / "scratch", "w0rker", workload_for(
        prepared.spec, spec), prepared.identities.protocol_hash)  # fmt: skip
    assert len(opens(spec)) == before and mrun.prepared is prepared
    assert mrun.rp.spec_text.encode() == source.data and mrun.rp.freeze_record is None

    def request(path: Path, digest: str) -> AttemptRequest:
        return AttemptRequest(
            run_id="c0ffee", protocol_hash=prepared.identities.protocol_hash,
            spec_path=str(path), spec_name="no-such-spec.toml", spec_digest=digest,
            cell_id="sha256:" + "0" * 64, attempt=1, image="x",
        )  # fmt: skip

    found = _same_spec(request(spec, source.digest))
    assert found is not None and found.data == source.data
    assert len(opens(spec)) == before + 1  # one bounded read, digest checked on those bytes
    spec.write_text(spec.read_text() + "\n# edited\n")
    assert _same_spec(request(spec, source.digest)) is None  # other bytes: refused
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert _same_spec(request(fifo, source.digest)) is None  # refused, never blocks


# -------------------------------------------------------------------------- bounded, equal


def test_the_one_read_is_bounded(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        SpecSource.read(fifo)  # refused before it is opened: never blocks
    big = tmp_path / "big.toml"
    with big.open("wb") as fh:
        fh.truncate(SPEC_CAP + 1)  # sparse: nothing is allocated, nothing may be read
    with pytest.raises(InputError, match="limit") as e:
        SpecSource.read(big)
    assert e.value.file == str(big)


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except InputError as exc:
        return ("InputError", exc.message, exc.file, exc.key, exc.line)


def _same_as_load_spec(path: Path) -> None:
    data = path.read_bytes()
    assert _outcome(lambda: parse_spec(data, path)) == _outcome(lambda: load_spec(path))


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_spec_is_load_spec_on_every_bad_spec(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    spec = copy_example(tmp_path, TEXT.replace(case.old, case.new, 1), f"{name}.toml")
    _same_as_load_spec(spec)
    assert isinstance(_outcome(lambda: load_spec(spec)), tuple)  # each case is an error


def test_parse_spec_is_load_spec_on_good_specs(tmp_path: Path) -> None:
    for spec in (SMOKE, ROOT / "specs" / "swe-lite.toml", copy_example(tmp_path)):
        _same_as_load_spec(spec)
        assert not isinstance(_outcome(lambda s=spec: load_spec(s)), tuple)  # type: ignore[misc]
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"schema = '\xe9'\n")
    _same_as_load_spec(bad)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("fuzz")
    copy_example(d)
    yield d


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_texts())
def test_parse_spec_is_load_spec_on_fuzzed_specs(fuzz_dir: Path, text: str) -> None:
    spec = fuzz_dir / "example.toml"
    spec.write_text(text, "utf-8", errors="surrogatepass")
    _same_as_load_spec(spec)


# ------------------------------------------------------------------------------- contracts


def test_a_resumed_run_takes_its_contracts_from_protocol_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = smoke_copy(tmp_path)
    source = SpecSource.read(spec)
    workload = workload_for(source.spec, spec)
    made = MatrixRun.create(prepare(source), tmp_path / "runs", "a1b2c3", True, workload)

    def no_witnesses(directory: Path) -> Any:
        raise AssertionError(f"witnesses/ read at resume: {directory}")

    monkeypatch.setattr(prepared_mod, "load_contracts", no_witnesses)
    rp = read_protocol(made.run_dir)
    resumed = MatrixRun.resume(source, made.run_dir, workload)
    assert dict(resumed.prepared.contracts) == rp.contract_map()
    assert for_run(source, rp).freeze_record == rp.freeze_record


def test_run_matrix_hands_the_attempts_protocol_json_contracts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """witnesses/ edited after create: the run's attempts still get protocol.json's contracts
    (RunServices is replaced by a recorder; its own use of them: tests/runtime)."""
    import runner.orchestrate as orchestrate
    from runner.imagebuild import builder as images
    from runner.runtime import envcollect, executor
    from runner.runtime.attempt import services

    spec = smoke_copy(tmp_path)
    source = SpecSource.read(spec)
    workload = workload_for(source.spec, spec)
    mrun = MatrixRun.create(prepare(source), tmp_path / "runs", "a1b2c3", True, workload)
    given: dict[str, Any] = {}

    class Recorder:
        def __init__(self, run_id: str, run_dir: Path, **kw: Any) -> None:
            given.update(kw)
            self.subject_root = tmp_path

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    class Built:
        tag = "localhost/afb-test:none"

    class Env:
        execution_environment_hash = "sha256:" + "1" * 64

        def to_json(self) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(services, "RunServices", Recorder)
    stores: list[object] = []
    monkeypatch.setattr(
        images, "ensure_image", lambda folder, store: stores.append(store) or Built()
    )
    monkeypatch.setattr(envcollect, "observe", lambda spec, image: Env())
    monkeypatch.setattr(executor, "execute", lambda *a, **k: executor.RunSummary(
        mrun.run_dir, 0, 0, 0.0))  # fmt: skip
    monkeypatch.setattr(services, "load_contracts", lambda d: {})  # "witnesses/ edited"
    orchestrate.run_matrix(mrun, workload, orchestrate.RunOptions(jobs=1))
    rp = read_protocol(mrun.run_dir)
    assert given["contracts"] == rp.contract_map() and given["contracts"]
    # the run's sandbox backend (default podman) serves its attempts and holds its image
    from runner.runtime.sandbox import podman

    assert given["sandbox_backend"] == "podman" and isinstance(stores[0], podman.PodmanImages)
    assert sha256_digest(rp.spec_text.encode()) == source.digest


# ------------------------------------------------------------------------------ RunOptions


def test_run_options_refuse_kept_dirs_on_a_cluster() -> None:
    from runner.orchestrate import Cluster, RunOptions

    with pytest.raises(InputError, match="--keep-subject-dirs"):
        RunOptions(keep_subject_dirs=True, cluster=Cluster("tcp://127.0.0.1:1"))
    with pytest.raises(AttributeError):
        RunOptions().jobs = 2  # type: ignore[misc]  # frozen


def test_run_options_refuse_an_unknown_sandbox_backend_naming_the_registered() -> None:
    from runner.orchestrate import Cluster, RunOptions

    with pytest.raises(InputError, match=r"--sandbox 'nope'.*registered: .*podman"):
        RunOptions(sandbox_backend="nope")
    with pytest.raises(InputError, match="bench worker --sandbox"):
        RunOptions(sandbox_backend="other", cluster=Cluster("tcp://127.0.0.1:1"))
    assert RunOptions().sandbox_backend == "podman"


@pytest.mark.parametrize("command", [
    ["run", "specs/example.toml", "--sandbox", "nope"],
    ["worker", "--scheduler", "tcp://127.0.0.1:1", "--spec", "specs/example.toml",
     "--sandbox", "nope"],
])  # fmt: skip
def test_bench_refuses_an_unknown_sandbox_backend_with_exit_2(command: list[str]) -> None:
    res = CliRunner().invoke(app, command)
    assert res.exit_code == 2, res.output
    assert "no such sandbox backend; registered: podman" in res.output


def test_rerun_refuses_another_protocol_before_anything_is_built_or_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opens: Callable[[Path], list[str]]
) -> None:
    """`bench reproduce --rerun` reads the checkout's spec once and holds its protocol against
    the bundle's before building an image or making a run directory."""
    from runner.imagebuild import builder as images
    from runner.orchestrate import rerun

    spec = smoke_copy(tmp_path).rename(tmp_path / "spec" / SMOKE.name)
    spec.write_text(spec.read_text().replace("cap = 2", "cap = 3"))  # another protocol
    source = SpecSource.read(spec)
    bundle = MatrixRun.create(prepare(source), tmp_path / "runs", "a1b2c3", True, workload_for(
        source.spec, spec))  # fmt: skip
    bundle.record_start(None, None)

    def no_image(folder: Path) -> Any:
        raise AssertionError("an image was built for a rerun that is refused")

    monkeypatch.setattr(images, "ensure_image", no_image)
    before = len(opens(SMOKE))
    out = tmp_path / "again"
    with pytest.raises(InputError, match="another protocol than the bundle's"):
        rerun(bundle.run_dir, out)
    assert len(opens(SMOKE)) == before + 1
    assert not out.exists()


def test_a_new_run_needs_the_freeze_state(tmp_path: Path) -> None:
    """A value prepared without the freeze log (a worker's) cannot create a run: the run would
    otherwise record no freeze without its spec ever being held against the log."""
    source = SpecSource.read(SMOKE)
    unchecked = prepare(source, freeze=False)
    with pytest.raises(ValueError, match="freeze state"):
        MatrixRun.create(unchecked, tmp_path, "a1b2c3", True, workload_for(source.spec, SMOKE))
    assert not any(tmp_path.iterdir())
