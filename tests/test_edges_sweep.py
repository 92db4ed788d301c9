"""A sweep's arguments and folder: a name that would leave the output folder, an executor
setting that would be ignored, batches that cannot be joined, an unreachable scheduler and a
second sweep into a folder in use are refused in one line before anything runs."""

from __future__ import annotations

import time

import pytest
from test_cli import one_line, run_cli
from test_io import tiny

from wflow.config import validate
from wflow.errors import ConfigError
from wflow.storage import io
from wflow.sweeps import sweep as S


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", ""])
def test_a_name_that_leaves_the_folder_is_refused(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    rc, _, err = run_cli(capsys, "sweep", "--set", "solver.T=0.02", "--name", name,
                         "-o", "out", "-q")
    assert rc == 2 and f"name = {name!r}: must be a plain file name" in one_line(err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out"]  # nothing written


@pytest.mark.parametrize("argv, expect", [
    (["--workers", "0"], "n_workers = 0 (--workers): must be an integer >= 1"),
    (["--workers", "-2", "--executor", "dask"], "n_workers = -2 (--workers): must be an integer"),
    (["--address", "tcp://127.0.0.1:8786"],
     "address = 'tcp://127.0.0.1:8786' (--address) with executor = 'serial': a scheduler "
     "address needs executor = 'dask'"),
])
def test_executor_settings_that_would_be_ignored_are_refused(tmp_path, capsys, argv, expect):
    out = tmp_path / "out"
    rc, _, err = run_cli(capsys, "sweep", "--set", "solver.T=0.02", *argv, "-o", out, "-q")
    assert rc == 2 and expect in one_line(err)
    assert not out.exists()


def test_unreachable_scheduler_is_one_line_without_the_long_wait(tmp_path, capsys,
                                                                 monkeypatch):
    pytest.importorskip("dask.distributed")
    from wflow.sweeps import grid

    monkeypatch.setattr(grid, "CONNECT_TIMEOUT", 1.0)
    t0 = time.monotonic()
    rc, _, err = run_cli(capsys, "sweep", "--set", "solver.T=0.02", "--executor", "dask",
                         "--address", "tcp://127.0.0.1:9", "-o", tmp_path / "out", "-q")
    assert rc == 2, err
    assert "address = 'tcp://127.0.0.1:9' (--address): no Dask scheduler answers there " \
           "within 1 s" in one_line(err)
    assert time.monotonic() - t0 < 15
    monkeypatch.undo()
    assert grid.CONNECT_TIMEOUT < 30  # Dask's own default wait


def _event_cfg():
    return validate(tiny(**{"weights.process": "frozen", "solver.adaptive": True,
                            "solver.method": "bs32",
                            "solver.event": "merged_fraction", "solver.event_stop": True,
                            "solver.paths": 3}))


def test_event_stop_with_batches_of_paths_is_refused_up_front(tmp_path):
    with pytest.raises(ConfigError, match=r"paths_per_task = 2 with solver.event_stop = true "
                                          r"\(a, solver.paths = 3\).*give paths_per_task >= 3"):
        S.run_sweep([("a", _event_cfg())], tmp_path / "out", paths_per_task=2)
    assert not (tmp_path / "out").exists()


def test_a_second_sweep_into_a_folder_in_use_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tasks = [("a", validate(tiny()))]
    held = io.lock_folder(out)  # another sweep writing there
    try:
        with pytest.raises(FileExistsError, match=f"{out}: another wflow sweep \\(pid \\d+\\) "
                                                  f"is writing into this folder"):
            S.run_sweep(tasks, out)
        assert sorted(p.name for p in out.iterdir()) == [".wflow-sweep.lock"]
    finally:
        held.release()
    rep = S.run_sweep(tasks, out)
    assert rep.counts["ran"] == 1
    assert not list(out.glob("*.lock")) and not list(out.glob(".*.lock"))


def test_disk_precheck_counts_the_space_the_partial_files_hold(tmp_path, capsys, monkeypatch):
    """A sweep stopped by a full disk leaves its ``.part`` file; once a little space is freed
    the rerun continues it, and the pre-check asks only for what the file still needs."""
    from test_cli import _toml
    from test_io import Interrupted, _fail_after_calls

    from wflow.engine import driver, memory

    cfg = tiny()
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(_toml(cfg))
    out = tmp_path / "out"
    out.mkdir()
    part = out / ".run.h5.part"
    _fail_after_calls(monkeypatch, 2 * 9 + 1, interrupt=True)
    with pytest.raises(Interrupted):
        driver.run_to_file(validate(cfg), part)
    monkeypatch.undo()
    held = part.stat().st_blocks * 512
    assert held > 10_000
    real = memory.disk_free
    monkeypatch.setattr(memory, "output_bytes", lambda c: held + 4096)
    monkeypatch.setattr(memory, "disk_free", lambda p: (8192, real(p)[1]))
    rc, stdout, err = run_cli(capsys, "sweep", cfg_file, "-o", out, "-q")
    assert rc == 0, err
    assert "1 resumed" in stdout
    monkeypatch.setattr(memory, "disk_free", lambda p: (2048, real(p)[1]))  # not even that
    (out / "run.h5").unlink()
    rc, _, err = run_cli(capsys, "sweep", cfg_file, "-o", out, "-q")
    assert rc == 2 and "needs about" in one_line(err)
