"""Sweeps: grid expansion, executor independence (serial vs Dask), skip/resume, studies pipeline."""

import csv
import json
import time

import h5py
import numpy as np
import pytest
from conftest import small_config

from wflow.errors import ConfigError
from wflow.storage import io
from wflow.studies import (
    STUDIES,
    Study,
    StudyOptions,
    get_study,
    register_study,
    run_study,
    summary_table,
)
from wflow.sweeps.sweep import expand_grid, run_sweep


@pytest.fixture(scope="module")
def dask_client():
    """One LocalCluster of 2 single-threaded worker processes for this module's tests (closed
    after them: its idle heartbeats and memory monitors would use CPU to the end of the run)."""
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_expand_grid_names_and_values():
    tasks = expand_grid(small_config(), {"model.heads": [1, 2], "model.beta": [0.5, 1.0]})
    assert [n for n, _ in tasks] == ["run-heads=1-beta=0.5", "run-heads=1-beta=1",
                                     "run-heads=2-beta=0.5", "run-heads=2-beta=1"]
    assert [c["model"]["heads"] for _, c in tasks] == [1, 1, 2, 2]
    with pytest.raises(ConfigError, match="model.heads"):
        expand_grid(small_config(), {"model.heads": [0]})


def _tasks():
    base = small_config(**{"solver.T": 0.1, "model.n": 8, "solver.backend": "numpy"})
    return expand_grid(base, {"model.heads": [1, 3]})


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The serial sweep of ``_tasks()`` into a fresh directory (its report and directory)."""
    out = tmp_path_factory.mktemp("serial")
    return run_sweep(_tasks(), out), out


def test_serial_then_skip(serial):
    rep, out = serial
    assert [r["action"] for r in rep.rows] == ["ran", "ran"]
    rows = run_sweep(_tasks(), out).rows
    assert [r["action"] for r in rows] == ["skipped (complete)"] * 2


def test_dask_equals_serial(tmp_path, dask_client, serial):
    a = serial[0].rows
    b = run_sweep(_tasks(), tmp_path / "dask", executor="dask", client=dask_client).rows
    for ra, rb in zip(a, b):
        _, xa, _ = io.read(ra["path"])
        _, xb, _ = io.read(rb["path"])
        assert sorted(xa) == sorted(xb)
        for k in xa:
            assert np.array_equal(xa[k], xb[k], equal_nan=True), k


def test_bad_executor(tmp_path):
    with pytest.raises(ConfigError, match="executor"):
        run_sweep(_tasks(), tmp_path, executor="mpi")


def test_dask_missing_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """Without dask.distributed the Dask executor fails with one line naming the extra, and
    creates no folder (neither the sweep's nor a grid point's batch folder)."""
    import sys

    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # `import` raises ImportError
    out = tmp_path / "sw"
    with pytest.raises(ConfigError, match=r"wflow\[distributed\]"):
        run_sweep(_tasks(), out, executor="dask", paths_per_task=1)
    assert not out.exists()


def test_section6_tasks_follow_spec():
    tasks = dict(get_study("section6").tasks())
    ou = tasks["ou-heads=100"]
    assert (ou["model"]["n"], ou["model"]["d"], ou["solver"]["dt"], ou["solver"]["T"]) == (200, 3, 5e-3, 20.0)
    assert ou["solver"]["paths"] == 10 and ou["weights"]["process"] == "ou"
    osc = tasks["oscillating-heads=10"]
    assert osc["weights"]["phase"] == "shared" and osc["solver"]["paths"] == 1
    assert sorted(tasks) == sorted(f"{f}-heads={h}" for f in ("ou", "oscillating") for h in (1, 10, 100))


def test_quick_study_pipeline(tmp_path):
    r = run_study("section6", tmp_path, scale="quick", formats=(),
                  overrides=["model.n=8", "solver.T=0.05", "solver.backend=numpy"])
    assert "fit G2 = a H^b" in r.text and "oscillating" in r.text
    assert (tmp_path / "summary.txt").read_text().strip() == r.text
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [(x["family"], x["H"]) for x in rows] == [(f, h) for f in ("ou", "oscillating")
                                                     for h in ("1", "10", "100")]
    assert not (tmp_path / "figures").exists()


def test_every_study_honours_the_options(caplog):
    """--ledger sets diagnostics.ledger in every run of every study; --set reaches every base;
    a --set on a key the study sweeps (regimes sweeps β) is refused in one line naming the
    study and the key; a study whose D_h are not symmetric refuses --ledger in one line."""
    opts = StudyOptions(scale="quick", ledger=True, overrides=("init.seed=11",))
    for name, study in STUDIES.items():
        if not study.ledger:
            with pytest.raises(ConfigError, match=rf"^--ledger .* with study {name}: [^\n]*$"):
                study.tasks(opts)
            continue
        tasks = study.tasks(opts)
        assert tasks, name
        for _, cfg in tasks:
            assert cfg["diagnostics"]["ledger"] is True, name
            assert cfg["init"]["seed"] == 11, name
        assert study.overridden(opts, tasks) == [], name
    assert not caplog.records
    with pytest.raises(ConfigError, match=r"^--set model.beta=0.5: study regimes sets model.beta"
                                          r"[^\n]*cannot hold"):
        STUDIES["regimes"].tasks(StudyOptions(scale="quick", overrides=("model.beta=0.5",)))
    with pytest.raises(ConfigError, match="scale"):
        StudyOptions(scale="tiny")
    with pytest.raises(ConfigError, match="allowed values are .*energy"):
        get_study("nope")


class TinyStudy(Study):
    """A study defined in this test file alone: two head counts, a table of the final energy."""

    name = "tiny-test-study"
    question = "does a study from outside the package run through run_study?"

    def base(self, scale):
        T = 0.02 if scale == "quick" else 0.04
        return {"model": {"n": 6, "heads": 1}, "solver": {"T": T, "dt": 0.01, "record_every": 1,
                                                          "paths": 1, "backend": "numpy"},
                "diagnostics": {"clustering": False}, "output": {"store_tokens": False}}

    def variants(self, base, scale):
        return expand_grid(base, {"model.heads": [1, 2]}, name="tiny")

    def summarize(self, data):
        return summary_table(data, ("energy", "ledger_residual"))

    def figures(self, data, outdir, formats):
        from wflow.studies._tables import _run_figures

        return _run_figures(data.paths, outdir, formats, ["G2"])


@pytest.fixture
def tiny_study():
    register_study(TinyStudy)
    yield TinyStudy
    STUDIES.pop(TinyStudy.name)


def test_study_registered_from_outside_the_package(tmp_path, tiny_study, capsys):
    from wflow.cli import main

    with pytest.raises(ValueError, match="already registered"):
        register_study(TinyStudy)
    # the table here, the figures below (formats = (): none drawn)
    r = run_study("tiny-test-study", tmp_path, scale="quick", ledger=True, formats=())
    assert r.name == "tiny-test-study" and len(r.paths) == 2
    assert r.table["run"] == ["tiny-heads=1", "tiny-heads=2"]
    assert all(np.isfinite(r.table["ledger_residual"]))  # --ledger reached the runs
    assert (tmp_path / "summary.csv").read_text().splitlines()[0] == ("scale,run,energy,"
                                                                      "ledger_residual")
    assert main(["study", "list"]) == 0
    assert "does a study from outside the package" in capsys.readouterr().out
    assert main(["study", "tiny-test-study", "--quick", "-q", "--no-plots",
                 "-o", str(tmp_path / "c")]) == 0
    assert "tiny-heads=2" in capsys.readouterr().out
    # figures: a progress bar over the files; a quick study's figures say they are quick
    # (PNG: its text chunk carries the mark; an SVG takes ~4 times longer to write)
    from PIL import Image

    r = run_study("tiny-test-study", tmp_path / "s", scale="quick", formats=("png",),
                  progress=True)
    pngs = sorted((tmp_path / "s" / "figures").rglob("*.png"))
    assert len(pngs) == 2
    for p in pngs:
        with Image.open(p) as im:
            assert "pipeline check" in im.text["Description"]
    assert "tiny-test-study figures" in capsys.readouterr().err  # (unmarked: test_plotting)


def test_cli_sweep_and_study(tmp_path, capsys):
    from wflow.cli import main

    args = ["sweep", "--grid", "model.heads=[1, 2]", "--set", "solver.T=0.05", "--set", "model.n=8",
            "--set", "solver.backend=numpy", "-o", str(tmp_path), "-q"]
    assert main(args) == 0
    assert (tmp_path / "run-heads=2.h5").exists()
    assert main(args) == 0
    assert "skipped (complete)" in capsys.readouterr().out
    # a rerun asking for another computation is refused, naming the key; nothing is touched
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.h5")}
    assert main([*args, "--set", "model.beta=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.beta = 1.0 there, 2.0 here" in err[0], err
    assert "--overwrite" in err[0] and "run-heads=1.h5" in err[0]
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.h5")} == before
    # a file whose stored hash is of another wflow's rule is judged by its configuration
    with h5py.File(tmp_path / "run-heads=1.h5", "r+") as f:
        f.attrs["config_hash"] = "0" * 64
    assert main(args) == 0
    assert capsys.readouterr().out.count("skipped (complete)") >= 2
    assert main([*args, "--set", "model.beta=2", "--overwrite"]) == 0
    with h5py.File(tmp_path / "run-heads=2.h5", "r") as f:
        assert json.loads(f.attrs["config"])["model"]["beta"] == 2.0
    assert main(["sweep", "--grid", "model.headz=[1]", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.heads" in err[0]
    twice = ["--grid", "model.heads=[1]", "--grid", "model.heads=[2]"]
    assert main(["sweep", *twice, "-o", str(tmp_path / "twice")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.heads: given twice" in err[0]
    assert not (tmp_path / "twice").exists()
    files = [str(tmp_path / f"run-heads={h}.h5") for h in (1, 2)]
    assert main(["plot", *files, "--kind", "head_scaling", "--kind", "G2", "--format", "png",
                 "-o", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "head_scaling.png").stat().st_size > 0
    assert (tmp_path / "f" / "run-heads=2" / "G2.png").stat().st_size > 0
    assert not list((tmp_path / "f").rglob("*.pdf"))  # --format png: PNG only
    assert main(["study", "nope", "-o", str(tmp_path)]) == 2
    assert main(["study", "list"]) == 0
    listed = capsys.readouterr().out
    for name in ("section6", "energy", "laplacian"):
        assert name in listed and get_study(name).question in listed


def test_cli_study_writes_results_and_figures(tmp_path):
    """section6 without figures (its six runs and the sweep summary), then a study with its
    figures drawn (laplacian: eight runs, its three study figures); the head-scaling figure
    itself is tested in test_plotting."""
    from wflow.cli import main

    fast = ["--set", "model.n=8", "--set", "solver.T=0.1", "--set", "solver.backend=numpy"]
    out = tmp_path / "s6"
    s6 = ["--set", "model.n=8", "--set", "solver.T=0.05", "--set", "solver.backend=numpy"]
    assert main(["study", "section6", "--quick", "-q", "--no-plots", "-o", str(out), *s6]) == 0
    assert len(list(out.glob("*.h5"))) == 6 + 1  # the runs and the sweep summary
    assert (out / "sweep_summary.h5").exists() and not (out / "figures").exists()
    assert (out / "summary.csv").stat().st_size > 0
    summary = (out / "summary.csv").read_bytes()
    assert main(["study", "section6", "--quick", "-q", "--no-plots", "-o", str(out), *s6,
                 "--set", "model.beta=2"]) == 2  # another computation: refused, not reused
    assert (out / "summary.csv").read_bytes() == summary
    lap = tmp_path / "lap"
    assert main(["study", "laplacian", "--quick", "-q", "-o", str(lap), *fast]) == 0
    assert len(list(lap.glob("*.h5"))) == 8 + 1
    figs = sorted(p.relative_to(lap / "figures").as_posix() for p in lap.glob("figures/**/*.png"))
    assert figs == ["anova_time.png", "final_vs_fraction.png", "within_variance_time_d3.png"], figs
    assert not list(lap.glob("figures/**/*.pdf"))  # quick: PNG only


def test_energy_study_orders(tmp_path):
    """The discrete energy identity study (quick: T = 0.4): fitted ledger orders ≈ 1, 2, 2."""
    text = run_study("energy", tmp_path, scale="quick", formats=()).text
    orders = {line.split()[0]: float(line.split()[5]) for line in text.splitlines()
              if line.split() and line.split()[0] in ("euler", "heun", "rk4")}
    assert abs(orders["euler"] - 1) < 0.2 and orders["heun"] > 1.8 and orders["rk4"] > 1.8, text


# ---------------------------------------------------------------- batches, summary, failures, restarts

SUMMARY_IGNORED = ("wall_time", "worker")


def _mc_tasks(**grid):
    base = small_config(**{"solver.T": 0.1, "model.n": 8, "solver.backend": "numpy",
                           "solver.paths": 4, "init.per_path_tokens": True,
                           "init.per_path_weights": True})
    return expand_grid(base, grid or {"model.heads": [1, 2]})


@pytest.fixture(scope="module")
def mc_serial(tmp_path_factory):
    """The serial, unbatched sweep of ``_mc_tasks()`` (its report and directory), run once: the
    reference of the executor, batching, restart and worker-loss tests."""
    out = tmp_path_factory.mktemp("mc") / "serial"
    return run_sweep(_mc_tasks(), out), out


def _same_summary(a, b):
    assert list(a.data_vars) == list(b.data_vars)
    assert list(a["point"].values) == list(b["point"].values)
    assert list(a["path"].values) == list(b["path"].values)
    for k in a.data_vars:
        if k in SUMMARY_IGNORED:
            continue
        va, vb = a[k].values, b[k].values
        if va.dtype.kind == "f":
            assert np.array_equal(va, vb, equal_nan=True), k
        else:
            assert list(va) == list(vb), k


def test_path_streams_depend_on_seed_and_index_only():
    """Paths [2, 4) run alone equal paths 2, 3 of one run of four, per-path X0 and D(0) too."""
    import wflow

    cfg = _mc_tasks()[1][1]
    whole = wflow.simulate(cfg)
    part = wflow.simulate({**cfg, "init": {**cfg["init"], "first_path": 2},
                           "solver": {**cfg["solver"], "paths": 2}})
    assert np.array_equal(whole.X[:, 2:], part.X)
    assert np.array_equal(whole.energy[:, 2:], part.energy)
    assert not np.array_equal(whole.X[0, 0], whole.X[0, 1])  # per-path tokens differ


def test_summary_identical_across_executors_and_batches(tmp_path, dask_client, mc_serial):
    serial, serial_dir = mc_serial
    k1 = run_sweep(_mc_tasks(), tmp_path / "k1", executor="dask", client=dask_client,
                   paths_per_task=1)
    kall = run_sweep(_mc_tasks(), tmp_path / "kall", executor="dask", client=dask_client,
                     paths_per_task=4)
    assert k1.counts["tasks"] == 8 and kall.counts["tasks"] == 2 and not k1.failed
    s = serial.summary
    assert s.sizes["row"] == 8 and "model.heads" in s and set(s["status"].values) == {"complete"}
    assert np.all(np.isfinite(s["G2"].values)) and np.all(np.isfinite(s["ledger_residual"]))
    _same_summary(s, k1.summary)
    _same_summary(s, kall.summary)
    from wflow.sweeps.sweep import read_summary

    _same_summary(s, read_summary(tmp_path / "k1"))
    header = (tmp_path / "k1" / "sweep_summary.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["point", "path", "model.heads"]  # then every non-default key
    assert {"model.n", "solver.T", "solver.backend"} <= set(header[3:header.index("G2")])
    assert "output.path" not in header and "init.first_path" not in header
    # the joined grid-point file equals the unbatched one, series by series
    _, xa, _ = io.read(serial_dir / "run-heads=2.h5")
    _, xb, attrs = io.read(tmp_path / "k1" / "run-heads=2.h5")
    assert attrs["status"] == "complete" and sorted(xa) == sorted(xb)
    assert not (tmp_path / "k1" / "run-heads=2.batches").exists()
    for k in xa:
        assert np.array_equal(xa[k], xb[k], equal_nan=True), k


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow the test provokes
def test_failed_point_is_reported_and_others_complete(tmp_path, dask_client, capsys):
    tasks = _mc_tasks(**{"model.beta": [1.0, 1e6]})
    rep = run_sweep(tasks, tmp_path, executor="dask", client=dask_client, paths_per_task=2)
    assert list(rep.failed) == ["run-beta=1e+06"] and rep.counts["failed"] == 2
    s = rep.summary
    status = dict(zip(s["point"].values, s["status"].values))
    assert status == {"run-beta=1": "complete", "run-beta=1e+06": "failed"}
    bad = s.where(s["status"] == "failed", drop=True)
    assert all("NumericalError" in e for e in bad["error"].values)
    assert np.all(np.isfinite(s.where(s["status"] == "complete", drop=True)["G2"].values))
    assert io.file_status(tmp_path / "run-beta=1.h5") == "complete"
    assert not (tmp_path / "run-beta=1e+06.h5").exists()
    from wflow.cli import main

    args = ["sweep", "--grid", "model.beta=[1.0, 1e6]", "--set", "solver.T=0.05",
            "--set", "model.n=8", "--set", "solver.backend=numpy", "-q", "-o", str(tmp_path / "c")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "run-beta=1e+06" in err and "run-beta=1 " not in err
    assert main([*args, "--paths-per-task", "0"]) == 2  # bad input: nothing runs


def test_rerun_computes_only_missing_tasks(tmp_path, mc_serial):
    """An interrupted sweep (one batch complete, one partial, the rest absent): the rerun
    skips the complete batch, resumes the partial one, runs the others."""
    from wflow.engine import driver, series
    from wflow.engine.run import Simulation
    from wflow.sweeps.sweep import _part, _plan, run_task

    tasks = _mc_tasks(**{"model.heads": [1, 2]})
    points = _plan(tasks, tmp_path, 2)
    done, partial = points[0].batches[0], points[1].batches[1]
    for b in (done, partial):
        b[4].parent.mkdir(parents=True)
    assert run_task(done[2], done[3], done[4])["action"] == "ran"  # batch 0 of point 0 done
    sim = Simulation(partial[3], explicit=())  # batch 1 of point 1: killed after step 0
    rec = io.create(_part(partial[4]), sim.config, header=driver.header(sim),
                    describe=series.describe_full)
    driver._first_checkpoint(sim, rec)
    rec.close()
    assert io.file_status(_part(partial[4])) == "running"
    rep = run_sweep(tasks, tmp_path, paths_per_task=2)
    assert rep.counts == {"tasks": 4, "failed": 0, "skipped": 1, "ran": 2, "resumed": 1}
    assert "1 skipped (complete), 2 ran, 1 resumed" in rep.describe()
    again = run_sweep(tasks, tmp_path, paths_per_task=2)
    assert again.counts["skipped"] == 4 and again.counts["ran"] == 0
    assert tasks == _mc_tasks()  # the reference's tasks
    _same_summary(mc_serial[0].summary, rep.summary)


def test_worker_killed_mid_task_sweep_completes(tmp_path, dask_client, mc_serial):
    """A test hook kills the worker process (os._exit) right after a task's first checkpoint,
    once: Dask reruns the task, which resumes the partial file; the summary is unchanged."""
    marker = tmp_path / "killed"
    rep = run_sweep(_mc_tasks(), tmp_path / "out", executor="dask", client=dask_client,
                    paths_per_task=2, _exit_at={"run-heads=2[paths 2-3]": (0, str(marker))})
    assert marker.exists() and not rep.failed and rep.counts["tasks"] == 4
    assert [r["status"] for r in rep.rows] == ["complete"] * 4
    assert not list((tmp_path / "out").rglob("*.part"))
    _same_summary(mc_serial[0].summary, rep.summary)


def test_worker_lost_beyond_retries_is_a_failed_point(tmp_path, dask_client):
    """A task that kills its worker at every attempt, on a cluster that allows no lost worker
    per task (the scheduler's ``allowed_failures = 0``, what
    ``distributed.scheduler.allowed-failures = 0`` sets; the module's cluster, restored after):
    Dask gives up with ``KilledWorker``; that grid point is reported failed with its error, the
    other completes and is kept, and no partial file is counted as a result."""
    scheduler = dask_client.cluster.scheduler
    allowed = scheduler.allowed_failures
    dask_client.wait_for_workers(2, timeout=60)  # a worker killed by an earlier test is back
    scheduler.allowed_failures = 0
    try:
        tasks = _mc_tasks(**{"model.heads": [1, 2]})
        rep = run_sweep(tasks, tmp_path, executor="dask", client=dask_client, retries=0,
                        _exit_at={"run-heads=2": (0, None)})
    finally:
        scheduler.allowed_failures = allowed
    assert list(rep.failed) == ["run-heads=2"] and "KilledWorker" in rep.failed["run-heads=2"]
    status = dict(zip(rep.table["point"], rep.table["status"]))
    assert status == {"run-heads=1": "complete", "run-heads=2": "failed"}
    assert io.file_status(tmp_path / "run-heads=1.h5") == "complete"
    assert not (tmp_path / "run-heads=2.h5").exists()
    assert rep.counts["failed"] == 1 and rep.counts["ran"] == 1


def test_run_sweep_api_and_streams(tmp_path):
    """wflow.run_sweep returns the summary; independent streams: a seed per grid point from
    its values, unchanged when a value is added to the sweep."""
    import wflow

    base = small_config(**{"solver.T": 0.05, "model.n": 8, "solver.backend": "numpy"})
    ds = wflow.run_sweep(base, {"model.heads": [1, 2]}, tmp_path, paths_per_task=1)
    assert ds.sizes["row"] == 4 and ds.attrs["ran"] == 4 and ds.attrs["failed"] == "{}"
    one = wflow.run_sweep(base, {"model.heads": [2]}, tmp_path / "one")  # the swept key
    assert list(one["model.heads"].values) == [2, 2]                     # with a single value
    common = dict(expand_grid(base, {"model.heads": [1, 2]}))
    assert {c["init"]["seed"] for c in common.values()} == {7}
    two = dict(expand_grid(base, {"model.heads": [1, 2]}, streams="independent"))
    three = dict(expand_grid(base, {"model.heads": [1, 2, 5]}, streams="independent"))
    assert two["run-heads=1"]["init"]["seed"] != two["run-heads=2"]["init"]["seed"]
    assert all(three[k] == two[k] for k in two)


def test_second_attempt_waits_for_the_first(tmp_path, monkeypatch):
    """Dask may run a task twice: an attempt finding its file locked by the other waits, then
    finds the result complete and skips it. The attempt's pause between tries is replaced by
    one that reports it (the attempt found the file locked and is waiting) and returns once the
    lock is released, instead of sleeping a fixed second of wall time."""
    import threading
    import types

    from wflow.storage._locks import _Lock
    from wflow.sweeps import sweep as sw

    name, cfg = _tasks()[0]
    path = tmp_path / f"{name}.h5"
    lock = _Lock(sw._part(path)).acquire(path)
    monkeypatch.setattr(sw, "LOCK_WAIT", 60.0)
    waiting, released, pauses = threading.Event(), threading.Event(), []

    def pause(seconds):
        pauses.append(seconds)
        waiting.set()
        released.wait(60)

    monkeypatch.setattr(sw, "time", types.SimpleNamespace(
        sleep=pause, monotonic=time.monotonic, perf_counter=time.perf_counter,
        time=time.time, time_ns=time.time_ns))
    done = {}
    th = threading.Thread(target=lambda: done.update(sw.run_task(name, cfg, path)))
    th.start()
    while not waiting.wait(0.05) and th.is_alive():
        pass
    assert waiting.is_set(), done  # the attempt found the file locked and waits
    assert th.is_alive() and not done and io.file_status(path) is None
    lock.release()
    released.set()
    th.join(60)
    assert pauses and pauses[0] > 0
    assert done["action"] == "ran" and io.file_status(path) == "complete"
