"""Sweeps: grid expansion, executor independence (serial vs Dask), skip/resume, studies pipeline."""

import csv

import numpy as np
import pytest
from conftest import small_config

from wflow.errors import ConfigError
from wflow.lab.studies import (
    STUDIES,
    Study,
    StudyOptions,
    get_study,
    register_study,
    run_study,
    summary_table,
)
from wflow.lab.sweep import expand_grid, run_sweep
from wflow.storage import io


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


def test_serial_then_skip(tmp_path):
    rows = run_sweep(_tasks(), tmp_path)
    assert [r["action"] for r in rows] == ["ran", "ran"]
    rows = run_sweep(_tasks(), tmp_path)
    assert [r["action"] for r in rows] == ["skipped (complete)"] * 2


def test_dask_equals_serial(tmp_path):
    a = run_sweep(_tasks(), tmp_path / "serial")
    b = run_sweep(_tasks(), tmp_path / "dask", executor="dask", n_workers=2)
    for ra, rb in zip(a, b):
        _, xa, _ = io.read(ra["path"])
        _, xb, _ = io.read(rb["path"])
        assert sorted(xa) == sorted(xb)
        for k in xa:
            assert np.array_equal(xa[k], xb[k], equal_nan=True), k


def test_bad_executor(tmp_path):
    with pytest.raises(ConfigError, match="executor"):
        run_sweep(_tasks(), tmp_path, executor="mpi")


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
                  overrides=["model.n=20", "solver.T=0.1", "solver.backend=numpy"])
    assert "fit G2 = a H^b" in r.text and "oscillating" in r.text
    assert (tmp_path / "summary.txt").read_text().strip() == r.text
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [(x["family"], x["H"]) for x in rows] == [(f, h) for f in ("ou", "oscillating")
                                                     for h in ("1", "10", "100")]
    assert not (tmp_path / "figures").exists()


def test_every_study_honours_the_options():
    """--ledger sets diagnostics.ledger in every run of every study; --set reaches every base."""
    opts = StudyOptions(scale="quick", ledger=True, overrides=("model.beta=0.5",))
    for name, study in STUDIES.items():
        tasks = study.tasks(opts)
        assert tasks, name
        for _, cfg in tasks:
            assert cfg["diagnostics"]["ledger"] is True, name
            assert cfg["model"]["beta"] == 0.5, name
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

    def summarize(self, paths):
        return summary_table(paths, ("energy", "ledger_residual"))


@pytest.fixture
def tiny_study():
    register_study(TinyStudy)
    yield TinyStudy
    STUDIES.pop(TinyStudy.name)


def test_study_registered_from_outside_the_package(tmp_path, tiny_study, capsys):
    from wflow.cli import main

    with pytest.raises(ValueError, match="already registered"):
        register_study(TinyStudy)
    r = run_study("tiny-test-study", tmp_path, scale="quick", ledger=True)
    assert r.name == "tiny-test-study" and len(r.paths) == 2
    assert r.table["run"] == ["tiny-heads=1", "tiny-heads=2"]
    assert all(np.isfinite(r.table["ledger_residual"]))  # --ledger reached the runs
    assert (tmp_path / "summary.csv").read_text().splitlines()[0] == "run,energy,ledger_residual"
    assert main(["study", "list"]) == 0
    assert "does a study from outside the package" in capsys.readouterr().out
    assert main(["study", "tiny-test-study", "--quick", "-q", "-o", str(tmp_path / "c")]) == 0
    assert "tiny-heads=2" in capsys.readouterr().out


def test_cli_sweep_and_study(tmp_path, capsys):
    from wflow.cli import main

    args = ["sweep", "--grid", "model.heads=[1, 2]", "--set", "solver.T=0.05", "--set", "model.n=8",
            "--set", "solver.backend=numpy", "-o", str(tmp_path), "-q"]
    assert main(args) == 0
    assert (tmp_path / "run-heads=2.h5").exists()
    assert main(args) == 0
    assert "skipped (complete)" in capsys.readouterr().out
    assert main(["sweep", "--grid", "model.headz=[1]", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.heads" in err[0]
    files = [str(tmp_path / f"run-heads={h}.h5") for h in (1, 2)]
    assert main(["plot", *files, "--kind", "head_scaling", "--kind", "G2", "-o", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "head_scaling.png").stat().st_size > 0
    assert (tmp_path / "f" / "run-heads=2" / "G2.png").stat().st_size > 0
    assert main(["study", "nope", "-o", str(tmp_path)]) == 2
    assert main(["study", "list"]) == 0
    listed = capsys.readouterr().out
    for name in ("section6", "energy", "laplacian"):
        assert name in listed and get_study(name).question in listed


def test_cli_study_writes_results_and_figures(tmp_path):
    from wflow.cli import main

    out = tmp_path / "s6"
    assert main(["study", "section6", "--quick", "-q", "-o", str(out), "--set", "model.n=16",
                 "--set", "solver.T=0.1", "--set", "solver.backend=numpy"]) == 0
    assert len(list(out.glob("*.h5"))) == 6
    assert (out / "figures" / "head_scaling.png").stat().st_size > 0
    assert (out / "figures" / "ou-heads=10" / "snapshots.png").stat().st_size > 0
    assert (out / "summary.csv").stat().st_size > 0 and not list(out.glob("figures/*.pdf"))


def test_energy_study_orders(tmp_path):
    """The discrete energy identity study (quick: T = 0.4): fitted ledger orders ≈ 1, 2, 2."""
    text = run_study("energy", tmp_path, scale="quick", formats=()).text
    orders = {line.split()[0]: float(line.split()[5]) for line in text.splitlines()
              if line.split() and line.split()[0] in ("euler", "heun", "rk4")}
    assert abs(orders["euler"] - 1) < 0.2 and orders["heun"] > 1.8 and orders["rk4"] > 1.8, text
