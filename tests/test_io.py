"""HDF5 result files: round trip, checkpoints, resume after SIGKILL, failures, bad files."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

import wflow
from wflow import config as C
from wflow.cli import _toml
from wflow.engine import driver
from wflow.engine.run import State
from wflow.errors import ConfigError, NumericalError, RunFailedError
from wflow.model.attention import AttentionModel
from wflow.storage import io


def tiny(**over):
    """A tiny run (numpy backend: no compilation, fast in a fresh subprocess)."""
    cfg = {
        "model": {"d": 3, "n": 12, "beta": 1.0, "heads": 3},
        "init": {"seed": 11},
        "weights": {"process": "ou"},
        "solver": {"method": "euler", "dt": 0.01, "T": 0.2, "record_every": 5, "paths": 2,
                   "backend": "numpy"},
        "diagnostics": {"ledger": True},
        "output": {"store_tokens": True, "checkpoint_every": 4},
    }
    for key, val in over.items():
        sec, k = key.split(".")
        cfg.setdefault(sec, {})[k] = val
    return cfg


def record_datasets(path):
    """Every record dataset of a result file: {name: array}."""
    out = {}
    with h5py.File(path, "r") as f:
        for name in ("t", "X", "D"):
            if name in f:
                out[name] = f[name][...]
        for name in f["series"]:
            out[f"series/{name}"] = f["series"][name][...]
    return out


def all_datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[...]) if isinstance(o, h5py.Dataset)
                     else None)
    return out


def assert_same_records(a, b):
    da, db = record_datasets(a), record_datasets(b)
    assert sorted(da) == sorted(db)
    for k in da:
        assert da[k].dtype == db[k].dtype, k
        np.testing.assert_array_equal(da[k], db[k], err_msg=k, strict=True)


def status(path):
    with h5py.File(path, "r") as f:
        return f.attrs["status"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs, keyed by a name, computed once."""
    cache = {}

    def get(name, cfg):
        if name not in cache:
            p = tmp_path_factory.mktemp("ref") / f"{name}.h5"
            driver.run_to_file(cfg, p)
            cache[name] = p
        return cache[name]

    return get


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_round_trip_equals_simulate(tmp_path, backend):
    cfg = tiny(**{"solver.backend": backend, "output.store_weights": True})
    path = driver.run_to_file(cfg, tmp_path / "r.h5")
    got_cfg, arrays, attrs = io.read(path)
    assert got_cfg == C.validate(cfg)
    res = wflow.simulate(cfg)
    assert sorted(arrays) == sorted(res.arrays)
    assert "X" in arrays and "D" in arrays
    for k, a in res.arrays.items():
        np.testing.assert_array_equal(arrays[k], a, err_msg=k, strict=True)
    assert arrays["X"].shape == (5, 2, 12, 3)
    assert arrays["D"].shape == (5, 2, 3, 3, 3)
    assert attrs["status"] == "complete"
    assert attrs["format"] == io.FORMAT
    assert attrs["config_hash"] == driver.result_hash(cfg)
    assert json.loads(attrs["config"]) == C.validate(cfg)
    assert attrs["seed"] == 11
    assert attrs["wflow_version"] == wflow.__version__
    assert set(attrs["versions"]) >= {"numpy", "numba", "h5py", "scipy"}
    assert attrs["machine"]["cpu_count"] == os.cpu_count()
    assert attrs["created"].endswith("+00:00")
    with h5py.File(path, "r") as f:
        for name in ["t", "X", "D", "series/energy", "series/ledger_residual"]:
            ds = f[name]
            assert ds.chunks is not None and ds.maxshape[0] is None, name
            assert ds.attrs["description"] and ds.attrs["units"] and ds.attrs["shape"]
    assert not (tmp_path / "r.h5.lock").exists()


def test_read_without_tokens(reference):
    path = reference("plain", tiny())
    _, arrays, _ = io.read(path, tokens=False)
    assert "X" not in arrays and "energy" in arrays


def test_to_xarray(reference):
    ds = io.to_xarray(reference("plain", tiny()))
    assert ds["X"].dims == ("record", "path", "token", "coord")
    assert ds["energy"].dims == ("record", "path")


def test_same_config_twice_identical(tmp_path, reference):
    a = reference("plain", tiny())  # the same configuration, run before (or now) elsewhere
    b = driver.run_to_file(tiny(), tmp_path / "b.h5")
    da, db = all_datasets(a), all_datasets(b)
    assert sorted(da) == sorted(db)
    assert any(k.startswith("checkpoint/") for k in da)
    for k in da:
        np.testing.assert_array_equal(da[k], db[k], err_msg=k, strict=True)


def test_checkpoint_contents(reference):
    path = reference("plain", tiny())
    with h5py.File(path, "r") as f:
        best = io._best_checkpoint(f)
        n_t = len(f["t"])
    ckpt, n_rec, seq, slot = best
    state = State.from_checkpoint(ckpt)
    # 20 steps, checkpoint every 4 (k = 0 written too, the last step is not): 0,4,...,16
    assert state.k == 16 and seq == 5
    assert n_rec == 4 <= n_t  # records at steps 0, 5, 10, 15 precede step 16
    assert state.X.shape == (2, 12, 3) and set(state.pending) == {"E_mid", "drift", "mart", "tok", "res"}
    assert state.step_ledger.shape == (5, 2, 6)
    assert state.rng_states[0]["bit_generator"] == "PCG64"
    assert isinstance(state.rng_states[0]["state"]["state"], int)


# ------------------------------------------------------------------ overwrite rules
def test_refuses_complete_partial_and_foreign(tmp_path, reference):
    cfg = tiny()
    p = driver.run_to_file(cfg, tmp_path / "r.h5")
    before = p.read_bytes()
    with pytest.raises(FileExistsError, match="complete result.*--overwrite"):
        driver.run_to_file(cfg, p)
    assert p.read_bytes() == before
    driver.run_to_file(tiny(**{"init.seed": 3}), p, overwrite=True)
    assert C.validate(io.read(p)[0])["init"]["seed"] == 3

    # output.overwrite = true in the configuration counts as --overwrite
    driver.run_to_file(tiny(**{"output.overwrite": True}), p)

    partial = tmp_path / "partial.h5"
    rec = io.H5Recorder(partial, C.validate(cfg))
    rec.close()
    for ow in (False, True):
        with pytest.raises(FileExistsError, match="partial run: use `wflow resume"):
            driver.run_to_file(cfg, partial, overwrite=ow)
    assert status(partial) == "running"

    foreign = tmp_path / "notes.h5"
    foreign.write_text("my notes")
    with pytest.raises(FileExistsError, match="not a wflow result"):
        driver.run_to_file(cfg, foreign)
    assert foreign.read_text() == "my notes"
    driver.run_to_file(cfg, foreign, overwrite=True)
    assert status(foreign) == "complete"


def test_second_writer_is_refused(tmp_path):
    cfg = C.validate(tiny())
    p = tmp_path / "r.h5"
    rec = io.H5Recorder(p, cfg)
    try:
        with pytest.raises(FileExistsError, match="being written by another"):
            driver.resume(p)
    finally:
        rec.close()
    assert driver.resume(p).action == "restarted"


# ------------------------------------------------------------------ resume
def test_resume_complete_is_noop(reference):
    path = reference("plain", tiny())
    before = all_datasets(path)
    r = driver.resume(path)
    assert r.action == "noop" and r.n_records == 5
    after = all_datasets(path)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


class Boom(BaseException):
    """Stands for a SIGKILL in the middle of a checkpoint write."""


def crash_in_checkpoint(monkeypatch, cfg, path, nth, **kw):
    """Run ``cfg`` into ``path`` and die while writing the ``nth`` checkpoint (data written,
    completeness mark missing), as a SIGKILL at that moment would. ``kw``: more arguments of
    :func:`wflow.engine.driver.run_to_file` (e.g. ``overrides``)."""
    calls = {"n": 0}
    real = io._mark_complete

    def mark(g):
        calls["n"] += 1
        if calls["n"] == nth:
            raise Boom()
        real(g)

    monkeypatch.setattr(io, "_mark_complete", mark)
    with pytest.raises(Boom):
        driver.run_to_file(cfg, path, **kw)
    monkeypatch.setattr(io, "_mark_complete", real)


def test_crash_inside_checkpoint_write_resumes_identically(tmp_path, monkeypatch, reference):
    cfg = tiny()
    ref = reference("plain", cfg)
    p = tmp_path / "r.h5"
    crash_in_checkpoint(monkeypatch, cfg, p, 4)  # the 4th checkpoint (k = 12)
    assert status(p) == "running"
    info = io.inspect(p)
    assert info["checkpoint_step"] == 8  # the previous complete slot
    r = driver.resume(p)
    assert (r.action, r.from_step) == ("resumed", 8)
    assert status(p) == "complete"
    assert_same_records(p, ref)


def test_unreadable_newest_slot_falls_back(tmp_path, monkeypatch, reference):
    cfg = tiny()
    ref = reference("plain", cfg)
    p = tmp_path / "r.h5"
    _fail_after_calls(monkeypatch, 26, interrupt=True)  # in step 12: checkpoints 0, 4, 8, 12
    with pytest.raises(Interrupted):
        driver.run_to_file(cfg, p)
    monkeypatch.undo()
    with h5py.File(p, "r+") as f:
        ckpt, _, _, slot = io._best_checkpoint(f)
        assert ckpt["k"] == 12
        del f["checkpoint"][slot]["X"]  # damage the newest checkpoint
    assert io.inspect(p)["checkpoint_step"] == 8
    assert driver.resume(p).from_step == 8
    assert_same_records(p, ref)


def test_killed_before_first_checkpoint_restarts(tmp_path, reference):
    cfg = C.validate(tiny())
    ref = reference("plain", tiny())
    p = tmp_path / "r.h5"
    rec = io.H5Recorder(p, cfg)  # header only, some junk records, no checkpoint
    for i in range(3):
        rec.record({"t": float(i), "energy": np.full(2, 7.0), "X": np.zeros((2, 12, 3))})
    rec.flush()
    rec._release()  # the process dies: nothing else is written
    assert io.inspect(p)["checkpoint_step"] is None
    r = driver.resume(p)
    assert r.action == "restarted"
    assert status(p) == "complete"
    got = record_datasets(p)
    want = record_datasets(ref)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


class Interrupted(Exception):
    """Stands for anything but a numerical failure (a kill, an I/O error): the file stays
    resumable."""


def _fail_after_calls(monkeypatch, ncalls, interrupt=False):
    """Make AttentionModel.evaluate return a NaN energy from call ``ncalls`` on (or, with
    ``interrupt``, raise :class:`Interrupted` at that call)."""
    real = AttentionModel.evaluate
    count = {"n": 0}

    def evaluate(self, *a, **kw):
        F = real(self, *a, **kw)
        count["n"] += 1
        if count["n"] >= ncalls:
            if interrupt:
                raise Interrupted(f"interrupted at call {count['n']}")
            F = dataclasses.replace(F, energy=np.full_like(F.energy, np.nan))
        return F

    monkeypatch.setattr(AttentionModel, "evaluate", evaluate)


def test_numerical_error_marks_the_file_failed(tmp_path, monkeypatch):
    p = tmp_path / "r.h5"
    _fail_after_calls(monkeypatch, 15)  # 1 + 2 per step: fails at step 7
    with pytest.raises(NumericalError, match="non-finite energy at step 7"):
        driver.run_to_file(tiny(), p)
    monkeypatch.undo()
    assert status(p) == "failed" and io.file_status(p) == "failed"
    info = io.inspect(p)
    assert info["attrs"]["failed_step"] == 7
    assert info["attrs"]["error"] == "non-finite energy at step 7 (t = 0.07)"
    assert not (tmp_path / "r.h5.lock").exists()
    with pytest.raises(RunFailedError) as ei:  # resuming would fail again: refused
        driver.resume(p)
    assert str(ei.value) == (f"{p}: the run failed at step 7: non-finite energy at step 7 "
                             "(t = 0.07); nothing to resume (change the configuration and run "
                             "again with --overwrite)")
    assert status(p) == "failed"
    with pytest.raises(FileExistsError, match="holds a run that failed: use --overwrite"):
        driver.run_to_file(tiny(), p)
    driver.run_to_file(tiny(), p, overwrite=True)
    assert status(p) == "complete"


def test_interruption_leaves_resumable_file(tmp_path, monkeypatch, reference):
    cfg = tiny()
    ref = reference("plain", cfg)
    p = tmp_path / "r.h5"
    _fail_after_calls(monkeypatch, 15, interrupt=True)  # at step 7
    with pytest.raises(Interrupted):
        driver.run_to_file(cfg, p)
    monkeypatch.undo()
    assert status(p) == "running"
    info = io.inspect(p)
    assert info["checkpoint_step"] == 4 and "failed_step" not in info["attrs"]
    assert "Interrupted" in info["attrs"]["error"]
    assert not (tmp_path / "r.h5.lock").exists()
    r = driver.resume(p)
    assert (r.action, r.from_step, r.nsteps) == ("resumed", 4, 20)
    assert "error" not in io.inspect(p)["attrs"]
    assert_same_records(p, ref)


def test_resume_after_the_joint_evaluation_is_bit_identical(tmp_path, monkeypatch, reference):
    """numba backend, d = 3: each step evaluates the ledger's (X_{k+1}; D_k) and the next
    (X_{k+1}; D_{k+1}) as one batch of 2P paths; a resumed run evaluates its first step alone
    (P paths) and must end with the same bytes."""
    cfg = tiny(**{"solver.backend": "numba"})
    ref = reference("numba", cfg)
    p = tmp_path / "r.h5"
    # call 1 is (X_0; D_0), then one joint call per step: call 9 is step 7's, before the
    # checkpoint at k = 8 is written
    _fail_after_calls(monkeypatch, 9, interrupt=True)
    with pytest.raises(Interrupted):
        driver.run_to_file(cfg, p)
    monkeypatch.undo()
    assert io.inspect(p)["checkpoint_step"] == 4
    assert driver.resume(p).from_step == 4
    assert_same_records(p, ref)


# ------------------------------------------------------------------ SIGKILL
SLOW_CLI = textwrap.dedent(
    """
    import sys, time
    from wflow.model.attention import AttentionModel
    real = AttentionModel.evaluate
    def slow(self, *a, **kw):  # same numbers, just slower, so that the run can be killed
        time.sleep(0.004)
        return real(self, *a, **kw)
    AttentionModel.evaluate = slow
    from wflow.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _checkpoint_step(path):
    """The step of the file's newest complete checkpoint (every dataset read back and
    verified: ``io.inspect``), or None."""
    try:
        return io.inspect(path)["checkpoint_step"]
    except (ConfigError, OSError, KeyError):
        return None


def _polled_checkpoint_step(path):
    """The step of the newest complete checkpoint slot, read while a run writes the file:
    the slots only, not ``io.inspect``'s read-back of every dataset (~0.1 s a call, CPU
    taken from the run being waited for)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            best = io._best_checkpoint(f)
    except (OSError, KeyError, RuntimeError, ValueError):  # the writer is mid-write
        return None
    return None if best is None else int(best[0]["k"])


def _kill_when(proc, path, k_min, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc {proc.returncode}) before it could be killed: "
                                 f"{proc.stderr.read()}")
        k = _polled_checkpoint_step(path) if path.exists() else None
        if k is not None and k >= k_min:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            # the run may have written another checkpoint between the read and the kill (a
            # loaded machine): what counts is the checkpoint on disk after the kill
            return _checkpoint_step(path)
        time.sleep(0.05)  # checkpoints every 10 steps of ≥ 4 ms (SLOW_CLI): 1–2 of overshoot
    proc.kill()
    raise AssertionError("no checkpoint appeared in time")


def test_sigkill_then_resume_is_bit_identical(tmp_path, reference, capsys, monkeypatch):
    """Two runs killed by SIGKILL (child processes), then resumed to the end: the records
    are those of the uninterrupted run. The last two resumes run in this process (``main``:
    the killed runs are what need a process of their own)."""
    from wflow.cli import main

    cfg = tiny(**{"solver.T": 2.0, "output.checkpoint_every": 10, "output.store_weights": True})
    ref = reference("long", cfg)
    cfg_file = tmp_path / "cfg.toml"
    cfg_file.write_text(_toml(cfg))
    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_CLI)
    out = tmp_path / "f.h5"

    def start(*args):
        return subprocess.Popen([sys.executable, str(script), *args], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    k1 = _kill_when(start("run", str(cfg_file), "-o", str(out), "-q"), out, 30)
    assert status(out) != "complete"
    # a second kill, this time of the resumed run
    k2 = _kill_when(start("resume", str(out), "-q"), out, k1 + 50)
    assert k2 > k1 and status(out) != "complete"
    n_before = len(record_datasets(out)["t"])
    assert n_before >= k2 // 5  # records of the checkpoint are on disk
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["resume", str(out), "-q"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert f"from step {k2} of 200" in stdout
    assert status(out) == "complete"
    assert_same_records(out, ref)
    with h5py.File(out, "r") as f:
        assert f.attrs["resumes"] == 2
    rc = main(["resume", str(out)])
    stdout, err = capsys.readouterr()
    assert rc == 0 and "already complete" in stdout
    assert_same_records(out, ref)


# ------------------------------------------------------------------ bad files
def test_bad_files_are_config_errors(tmp_path, reference):
    text = tmp_path / "text.h5"
    text.write_text("hello")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    broken = tmp_path / "broken.h5"
    with h5py.File(broken, "w") as f:
        f.attrs["format"] = io.FORMAT
        f.attrs["status"] = "complete"
        f.attrs["config"] = "{not json"
    cases = [(tmp_path / "missing.h5", "file not found"), (text, "not an HDF5 file"),
             (plain, "not a wflow result file"), (broken, "not valid JSON"),
             (tmp_path, "is a directory")]
    for path, msg in cases:
        for fn in (io.read, driver.resume, io.inspect):
            with pytest.raises(ConfigError, match=msg) as ei:
                fn(path)
            assert str(path) in str(ei.value) and "\n" not in str(ei.value)


def test_missing_output_directory_is_created(tmp_path):
    """The rule of every command: missing output directories are created."""
    p = driver.run_to_file(tiny(), tmp_path / "no" / "such" / "r.h5")
    assert status(p) == "complete"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot create the directory"):
        driver.run_to_file(tiny(), tmp_path / "file" / "sub" / "r.h5")


@pytest.mark.parametrize("over", [{"solver.method": "jko", "solver.T": 0.12, "solver.record_every": 2,
                                   "solver.jko_maxiter": 5},
                                  {"diagnostics.w2": True}])
def test_resume_carries_memo_jko_and_w2(tmp_path, monkeypatch, reference, over):
    """Records after a resume need the last JKO step's statistics / the previous snapshot
    (State.memo): they must survive the checkpoint for a bit-identical continuation. (Five
    L-BFGS iterations per JKO step: what is checked is the continuation, not the minimiser;
    a converged minimisation costs ~3x the time.)"""
    cfg = tiny(**over)
    ref = reference("memo-" + "-".join(over), cfg)
    p = tmp_path / "r.h5"
    crash_in_checkpoint(monkeypatch, cfg, p, 3)  # the 3rd checkpoint (k = 8)
    r = driver.resume(p)
    assert r.action == "resumed" and r.from_step == 4
    assert_same_records(p, ref)


# ------------------------------------------------------------------ integrity, format, provenance
def test_datasets_are_checksummed_and_provenance_recorded(reference):
    p = reference("plain", tiny())
    with h5py.File(p, "r") as f:
        assert f.attrs["format"] == io.FORMAT == "wflow-results/2"
        assert f.attrs["format_version"] == 2
        assert f["series/energy"].fletcher32 and f["X"].fletcher32 and f["t"].fletcher32
        assert f["checkpoint/a/X"].fletcher32
    git = io._git()
    root = os.path.dirname(os.path.dirname(os.path.abspath(io.__file__)))
    if git:  # running from a git checkout
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        assert io.inspect(p)["attrs"]["git"] == {"commit": head, "dirty": git["dirty"]}
    else:
        assert "git" not in io.inspect(p)["attrs"]


def test_no_git_checkout_omits_the_attribute(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "_git", lambda: {})
    import wflow.storage._h5 as h5mod

    monkeypatch.setattr(h5mod, "_git", lambda: {})
    p = driver.run_to_file(tiny(), tmp_path / "r.h5")
    assert "git" not in io.inspect(p)["attrs"]


def _corrupt(path, offset, data=b"\x00garbage" * 4):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def test_corrupt_files_give_one_clear_error(tmp_path, capsys, monkeypatch):
    """Damaged data bytes (caught by the checksums) and damaged middle bytes: resume and info
    read the data, so both say "corrupt" (exit 2), never "already complete", after the
    reader's retries (a writer may be at work): its back-off of about a second is recorded
    here instead of slept."""
    import types

    from wflow.cli import main
    from wflow.storage import _h5

    slept = []
    monkeypatch.setattr(_h5, "time", types.SimpleNamespace(sleep=slept.append))

    good = driver.run_to_file(tiny(**{"model.n": 40}), tmp_path / "good.h5")
    data = tmp_path / "data.h5"
    data.write_bytes(good.read_bytes())
    with h5py.File(good, "r") as f:
        offset = f["X"].id.get_chunk_info(0).byte_offset
    _corrupt(data, offset + 100)
    middle = tmp_path / "middle.h5"
    middle.write_bytes(good.read_bytes())
    _corrupt(middle, good.stat().st_size // 2, b"\xff" * 64)
    for path, msg in [(data, f"{data}: corrupt result file: dataset 'X': its checksum does not "
                             "match"),
                      (middle, f"{middle}: corrupt result file")]:
        for cmd in ("resume", "info"):
            rc = main([cmd, str(path)])
            out, err = capsys.readouterr()
            assert rc == 2, (cmd, path, out)
            assert "already complete" not in out
            lines = err.strip().split("\n")
            assert len(lines) == 1 and lines[0].startswith(f"wflow: error: {msg}"), lines
            assert len(slept) >= 5 and 1.0 <= sum(slept) <= 3.0, slept  # retried ~1 s
            slept.clear()


def test_format_1_files_still_read_and_resume(tmp_path, monkeypatch):
    """Migration: a file of the previous format (no format_version, git, failed_step, no
    checksums) reads, and a partial one resumes."""
    p = tmp_path / "old.h5"
    _fail_after_calls(monkeypatch, 15, interrupt=True)
    with pytest.raises(Interrupted):
        driver.run_to_file(tiny(), p)
    monkeypatch.undo()
    with h5py.File(p, "r+") as f:
        f.attrs["format"] = "wflow-results/1"
        for k in ("format_version", "git", "error"):
            if k in f.attrs:
                del f.attrs[k]
    assert io.inspect(p)["status"] == "running"
    assert driver.resume(p).action == "resumed"
    cfg, arrays, attrs = io.read(p)
    assert attrs["status"] == "complete" and attrs["format"] == "wflow-results/1"
    assert len(arrays["t"]) == 5
