"""Full disks and I/O errors at every write site: one line naming the file, exit code 1 (2 for
a location the user gave that cannot be used), nothing half-written under a final name, and a
run that stays resumable to the same bits as an uninterrupted one.

The faults are injected at the lowest write call of each site (an ``OSError(ENOSPC)``); one
``slow`` test fills a real small file system (a tmpfs: needs root)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_cli import one_line, run_cli
from test_io import assert_same_records, status, tiny

from wflow.cli import _toml
from wflow.engine import driver
from wflow.errors import ConfigError, WriteError
from wflow.storage import _h5, files, io

ENOSPC = "No space left on device"


def _full(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_at(monkeypatch, module, name, call, partial=None):
    """Make ``module.name`` raise ``OSError(ENOSPC)`` at its ``call``-th call (1-based) and
    after; ``partial(*args)`` runs first (to leave half-written bytes, as a full disk does)."""
    real = getattr(module, name)
    count = {"n": 0}

    def fake(*a, **k):
        count["n"] += 1
        if count["n"] >= call:
            if partial is not None:
                partial(*a, **k)
            _full()
        return real(*a, **k)

    monkeypatch.setattr(module, name, fake)
    return count


def leftovers(folder):
    """Temporary files of the writers left in ``folder`` (there must be none)."""
    return sorted(p.name for p in Path(folder).rglob("*")
                  if ".tmp" in p.name or p.name.endswith((".creating", ".lock")))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return driver.run_to_file(tiny(), tmp_path_factory.mktemp("ref") / "ref.h5")


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "cfg.toml"
    p.write_text(_toml(tiny()))
    return p


# ------------------------------------------------------------------ the helpers
def test_write_error_classifies_user_locations_and_machine_failures(tmp_path):
    p = tmp_path / "f.png"
    for code, cls in [(errno.ENOSPC, WriteError), (errno.EIO, WriteError),
                      (errno.EDQUOT, WriteError), (errno.EACCES, ConfigError),
                      (errno.EROFS, ConfigError), (errno.ENOTDIR, ConfigError)]:
        e = files.write_error(p, OSError(code, "x"))
        assert type(e) is cls and str(e) == f"{p}: cannot write ({os.strerror(code)})"
    # h5py's errors carry the OS's errno in their text
    e = files.write_error(p, RuntimeError("Can't flush (file write failed: errno = 28, ...)"))
    assert type(e) is WriteError and str(e) == f"{p}: cannot write ({ENOSPC})"


def test_replacing_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "table.csv"
    p.write_text("old\n")
    with pytest.raises(WriteError, match=f"^{p}: cannot write \\({ENOSPC}\\)$"):
        with files.replacing(p) as tmp:
            assert tmp.parent == p.parent and tmp.suffix == ".csv" and tmp != p
            tmp.write_text("half of the ne")
            _full()
    assert p.read_text() == "old\n" and sorted(x.name for x in tmp_path.iterdir()) == [p.name]
    with files.replacing(p) as tmp:
        tmp.write_text("new\n")
    assert p.read_text() == "new\n" and sorted(x.name for x in tmp_path.iterdir()) == [p.name]


# ------------------------------------------------------------------ run and resume
@pytest.mark.parametrize("module, name, call", [
    (io, "_reserve", 3),           # the space of the checkpoint at k = 8: refused up front
    (io, "_append_records", 1),    # HDF5 writing the records before that checkpoint
    (io, "_append_records", 5),    # ... some record datasets grown, others not
    (io, "_write_slot", 3),        # HDF5 writing the slot of k = 8
])
def test_full_disk_during_a_run_then_resume(tmp_path, capsys, monkeypatch, cfg_file, reference,
                                            module, name, call):
    out = tmp_path / "r.h5"
    fail_at(monkeypatch, module, name, call)
    rc, stdout, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    monkeypatch.undo()
    assert rc == 1, err
    assert one_line(err) == (f"wflow: error: {out}: cannot write ({ENOSPC}); the file keeps its "
                             f"last checkpoint: `wflow resume {out}` continues the run once the "
                             f"disk can be written again")
    assert status(out) == "running" and leftovers(tmp_path) == []
    assert io.inspect(out)["checkpoint_step"] == 4  # the last good one
    rc, stdout, err = run_cli(capsys, "info", out)
    assert rc == 0 and f"interrupted at step 4 of 20 (resume with `wflow resume {out}`)" in stdout
    rc, stdout, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 0 and err == "" and f"resumed {out} from step 4 of 20" in stdout
    assert status(out) == "complete"
    assert_same_records(out, reference)


def test_full_disk_while_resuming(tmp_path, capsys, monkeypatch, reference):
    out = tmp_path / "r.h5"
    fail_at(monkeypatch, io, "_reserve", 3)
    with pytest.raises(WriteError):
        driver.run_to_file(tiny(), out)
    fail_at(monkeypatch, io, "_reserve", 2)  # resume: the takeover, then the first checkpoint
    rc, _, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 1 and one_line(err).startswith(f"wflow: error: {out}: cannot write ({ENOSPC})")
    assert f"`wflow resume {out}`" in err
    monkeypatch.undo()
    assert io.inspect(out)["checkpoint_step"] == 4
    assert driver.resume(out).from_step == 4
    assert_same_records(out, reference)


def test_full_disk_while_creating_the_file(tmp_path, capsys, monkeypatch, cfg_file):
    """The header is written under a temporary name: a full disk leaves nothing at all."""
    out = tmp_path / "r.h5"

    def half(self, tmp):
        Path(tmp).write_bytes(b"\x89HDF\r\n\x1a\n half a header")

    fail_at(monkeypatch, io.H5Recorder, "_write_header", 1, partial=half)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 1 and one_line(err) == f"wflow: error: {out}: cannot write ({ENOSPC})"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.toml"]


def test_unusable_location_is_exit_2(tmp_path, capsys, monkeypatch, cfg_file):
    """Refused by the file system for the user's location (not the machine failing): exit 2."""
    out = tmp_path / "r.h5"

    def denied(self, tmp):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp))

    monkeypatch.setattr(io.H5Recorder, "_write_header", denied)
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    assert rc == 2 and one_line(err) == f"wflow: error: {out}: cannot write (Permission denied)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.toml"]


def test_overwrite_replaces_a_damaged_partial_run(tmp_path, capsys, monkeypatch, cfg_file,
                                                  reference):
    """No circular advice: resume says the file is corrupt and to run again with
    --overwrite, and --overwrite does replace it. The damage is in the first records, which
    both checkpoints (k = 8 and 12) need: damage past a checkpoint is dropped on resume."""
    out = tmp_path / "r.h5"
    fail_at(monkeypatch, io, "_reserve", 5)
    run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    monkeypatch.undo()
    with h5py.File(out, "r") as f:  # damage the data (as a disk failing mid-write does)
        offset = f["X"].id.get_chunk_info(0).byte_offset
    with open(out, "r+b") as fh:
        fh.seek(offset + 10)
        fh.write(b"\xff" * 64)
    monkeypatch.setattr(_h5, "time", types.SimpleNamespace(sleep=lambda s: None))  # retries
    for cmd in (["resume", out], ["info", out], ["run", cfg_file, "-o", out, "-q"]):
        rc, _, err = run_cli(capsys, *cmd)
        assert rc == 2
        assert one_line(err).endswith("nothing to resume: run it again with "
                                      "`wflow run --overwrite`"), cmd
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q", "--overwrite")
    assert rc == 0, err
    assert status(out) == "complete"
    assert_same_records(out, reference)


def test_reserved_space_covers_every_write(tmp_path, monkeypatch):
    """The file never grows past the space reserved before a write (else HDF5 could meet a
    full disk halfway): tokens, weights, the ledger, a checkpoint every step."""
    grew = []
    real_reserve, real_writing = io._reserve, io.H5Recorder._writing
    seen = {}

    def reserve(path, n):
        seen.update(before=os.path.getsize(path), n=n)
        real_reserve(path, n)

    import contextlib

    @contextlib.contextmanager
    def writing(self, extra=0):
        with real_writing(self, extra) as f:
            yield f
        grew.append((os.path.getsize(self.path) - seen["before"], seen["n"]))

    monkeypatch.setattr(io, "_reserve", reserve)
    monkeypatch.setattr(io.H5Recorder, "_writing", writing)
    cfg = tiny(**{"model.n": 200, "output.store_weights": True, "output.checkpoint_every": 1,
                  "solver.record_every": 1, "solver.backend": "numba"})
    driver.run_to_file(cfg, tmp_path / "r.h5")
    assert len(grew) >= 20 and all(n > 0 for _, n in grew)
    assert max(g for g, _ in grew) > 100_000  # the records are written, not kept
    assert all(g <= n for g, n in grew), grew


# ------------------------------------------------------------------ sweeps and studies
def test_full_disk_in_a_sweep(tmp_path, capsys, monkeypatch):
    out = tmp_path / "sw"
    argv = ["sweep", "--grid", "model.heads=[1, 2]", "--set", "solver.T=0.05", "--set",
            "solver.backend=numpy", "--set", "model.n=8", "-q", "-o", out]
    fail_at(monkeypatch, io, "_reserve", 2)
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 1
    assert one_line(err) == (f"wflow: error: {out / '.run-heads=1.h5.part'}: cannot write "
                             f"({ENOSPC})")
    assert not list(out.glob("*.h5"))  # no final name for a run that is not complete
    monkeypatch.undo()
    # the summary: half a CSV under the temporary name, then the disk is full
    from wflow.sweeps import summary as sweep_summary

    class HalfWriter:
        def __init__(self, fh):
            self.fh = fh

        def writerow(self, row):
            self.fh.write("point,pa")
            _full()

    monkeypatch.setattr(sweep_summary.csv, "writer", HalfWriter)
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 1
    assert one_line(err) == f"wflow: error: {out / 'sweep_summary.csv'}: cannot write ({ENOSPC})"
    assert not (out / "sweep_summary.csv").exists() and leftovers(out) == []
    monkeypatch.undo()
    rc, stdout, err = run_cli(capsys, *argv)
    assert rc == 0, err
    assert (out / "sweep_summary.csv").read_text().startswith("point,")


def test_full_disk_in_study_summaries(tmp_path, monkeypatch):
    from wflow.studies import _tables as _base

    real = Path.write_text

    def half(self, text, *a, **k):
        real(self, text[: len(text) // 2], *a, **k)
        _full()

    monkeypatch.setattr(Path, "write_text", half)
    with pytest.raises(WriteError, match=f"summary.txt: cannot write \\({ENOSPC}\\)$"):
        with _base.replacing(tmp_path / "summary.txt") as tmp:
            tmp.write_text("a summary\n" * 10)
    monkeypatch.undo()

    def half_csv(fh):
        class W:
            def writerow(self, row):
                fh.write("run,ener")
                _full()
        return W()

    monkeypatch.setattr(_base.csv, "writer", half_csv)
    with pytest.raises(WriteError, match=f"summary.csv: cannot write \\({ENOSPC}\\)$"):
        _base.write_csv({"run": ["a"], "energy": [1.0]}, tmp_path / "summary.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ------------------------------------------------------------------ figures and animations
@pytest.fixture(scope="module")
def small_result(tmp_path_factory):
    return driver.run_to_file(tiny(**{"model.n": 20}), tmp_path_factory.mktemp("small") / "s.h5")


def _half_then_full(fig, fname, *a, **k):
    with open(fname, "wb") as fh:
        fh.write(b"\x89PNG half a figure")
    _full()


def test_full_disk_while_saving_figures(tmp_path, capsys, monkeypatch, small_result):
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", _half_then_full)
    out = tmp_path / "plots"
    rc, _, err = run_cli(capsys, "plot", small_result, "--kind", "G2", "--format", "png",
                         "-o", out)
    assert rc == 1
    assert one_line(err) == f"wflow: error: {out / 'G2.png'}: cannot write ({ENOSPC})"
    assert not out.exists()  # made for the command, left empty: removed


def test_full_disk_while_animating(tmp_path, capsys, monkeypatch, small_result):
    from matplotlib.animation import PillowWriter

    real = PillowWriter.grab_frame
    count = {"n": 0}

    def grab(self, **kw):
        real(self, **kw)
        count["n"] += 1
        if count["n"] == 3:
            with open(self.outfile, "wb") as fh:  # Pillow had begun the file
                fh.write(b"GIF89a half")
            _full()

    monkeypatch.setattr(PillowWriter, "grab_frame", grab)
    out = tmp_path / "a.gif"
    rc, _, err = run_cli(capsys, "animate", small_result, "-o", out)
    assert rc == 1 and one_line(err) == f"wflow: error: {out}: cannot write ({ENOSPC})"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ------------------------------------------------------------------ a real small file system
TMPFS_SKIP = "needs root to mount a small tmpfs"


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only; unmounted afterwards)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(TMPFS_SKIP)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "none", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{TMPFS_SKIP} ({r.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path, leave):
    """Take all the free space of ``path``'s file system but ``leave`` bytes."""
    free = shutil.disk_usage(path.parent).free
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, max(4096, free - leave))
    finally:
        os.close(fd)


@pytest.mark.slow
def test_a_real_full_disk_keeps_the_last_checkpoint(small_disk, tmp_path, capsys, monkeypatch):
    """The issue's reproducer, deterministic: after the second checkpoint the disk is filled
    (by another file); the run stops with one line (exit 1), the file reads back, and once the
    space is freed `wflow resume` ends with the bits of an uninterrupted run."""
    over = {"model.n": 300, "solver.record_every": 1, "output.checkpoint_every": 5}
    cfg = tiny(**over)
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    assert ref.stat().st_size > 600_000  # more than what is left below
    cfg_file = tmp_path / "cfg.toml"
    cfg_file.write_text(_toml(cfg))
    out, fill = small_disk / "r.h5", small_disk / "fill"
    real = io.H5Recorder.checkpoint
    seen = {"n": 0}

    def checkpoint(self, state):
        real(self, state)
        seen["n"] += 1
        if seen["n"] == 2:  # k = 5: another process takes the disk
            _fill(fill, leave=100_000)

    monkeypatch.setattr(io.H5Recorder, "checkpoint", checkpoint)
    monkeypatch.setattr(sys.modules["wflow.cli.commands"], "_check_disk",
                        lambda *a, **k: (0, 0))  # the disk was free when the run began
    rc, _, err = run_cli(capsys, "run", cfg_file, "-o", out, "-q")
    monkeypatch.undo()
    assert rc == 1
    assert one_line(err).startswith(f"wflow: error: {out}: cannot write ({ENOSPC}); the file "
                                    f"keeps its last checkpoint")
    assert io.inspect(out)["checkpoint_step"] == 5
    rc, stdout, _ = run_cli(capsys, "info", out)
    assert rc == 0 and "interrupted at step 5 of 20" in stdout
    # a figure onto the full disk: refused, nothing left under its name
    from wflow.figures import plotting

    with pytest.raises(WriteError, match=f"G2.png: cannot write \\({ENOSPC}\\)"):
        plotting.plot(ref, "G2", small_disk / "plots", formats=("png",))
    assert list((small_disk / "plots").iterdir()) == []
    fill.unlink()
    rc, stdout, err = run_cli(capsys, "resume", out, "-q")
    assert rc == 0, err
    assert status(out) == "complete"
    assert_same_records(out, ref)
    assert np.array_equal(io.read(out)[1]["X"], io.read(ref)[1]["X"])


def test_full_disk_while_joining_batches(tmp_path, monkeypatch, small_result):
    """A sweep's batches are joined into a temporary file renamed when complete."""
    import h5py as _h5py

    from wflow.storage import reading

    real = _h5py.Group.create_dataset
    count = {"n": 0}

    def create_dataset(self, name, *a, **k):
        count["n"] += 1
        if count["n"] == 3:
            _full()
        return real(self, name, *a, **k)

    monkeypatch.setattr(_h5py.Group, "create_dataset", create_dataset)
    dest = tmp_path / "joined.h5"
    cfg = io.read(small_result)[0]
    with pytest.raises(WriteError, match=f"^{dest}: cannot write \\({ENOSPC}\\)$"):
        reading.merge_paths([small_result, small_result], dest, cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_full_disk_in_a_dask_sweep(tmp_path, monkeypatch):
    """Dask: the task's WriteError stops the sweep (one line), not one failure per point."""
    from dask.distributed import Client

    from wflow.sweeps.sweep import expand_grid, run_sweep

    base = tiny(**{"solver.T": 0.05, "model.n": 8})
    tasks = expand_grid(base, {"model.heads": [1, 2]}, name="d")
    fail_at(monkeypatch, io, "_reserve", 1)
    # in-process workers (threads), so that the fault reaches them
    with Client(processes=False, n_workers=1, threads_per_worker=1,
                dashboard_address=":0") as client:
        with pytest.raises(WriteError, match=f"cannot write \\({ENOSPC}\\)$"):
            run_sweep(tasks, tmp_path, executor="dask", client=client, retries=0)
    assert not list(tmp_path.glob("*.h5")) and not (tmp_path / "sweep_summary.csv").exists()
