"""The time estimate [wflow.engine.timing]: a cost model of fixed and per-pair terms keyed by
kernel route, fitted to the timings a machine has seen, checked on a recorded table of
timings (``tests/data/timings.csv``: the calibration runs of ``wflow validate --calibrate``
and the runs of the ``estimate`` benchmark, n = 16 … 2000, d = 2 … 64, on a loaded 2-core
machine)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from wflow import config as C
from wflow.cli import main
from wflow.engine import timing

TABLE = Path(__file__).parent / "data" / "timings.csv"


def table(source=None):
    """``[(case, Sizes, seconds)]`` of the recorded table (rows of ``source`` only)."""
    out = []
    with open(TABLE, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if source is None or r["source"] == source:
                z = timing.Sizes(r["route"], *(int(r[k]) for k in timing.Sizes._fields[1:]))
                out.append((r["case"], z, float(r["seconds"])))
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WFLOW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_model_holds_the_calibration_table():
    """Fitted to the calibration runs, the model reproduces each within 2x (its terms can
    represent the timings: the fit's relative residuals are small)."""
    cal = table("calibration")
    f = timing.fit([(z, t) for _, z, t in cal])
    assert f.count == len(cal)
    for case, z, t in cal:
        est, share = timing.predict(z, f)
        assert 0.5 < est / t < 2.0, case
        assert share > timing.FITTED_SHARE, case  # every calibration run is measured


def test_the_checks_from_the_calibration_alone():
    """From the calibration alone, the pair-dominated checks (n = 2000, every d) are within
    2x of their measured time; the old rule, the rate of the last run times the pair terms
    N s P H n², from the n = 16 check (d = 3), is off by more than 30x on the default run
    and n = 2000 (d = 3), where the new estimate is within 2x."""
    cal = table("calibration")
    f = timing.fit([(z, t) for _, z, t in cal])
    checks = {case: (z, t) for case, z, t in table("check")}
    for d in (2, 3, 8, 64):
        z, t = checks[f"n=2000 d={d}"]
        est, share = timing.predict(z, f)
        assert 0.5 < est / t < 2.0, d
        assert share > timing.FITTED_SHARE
    z16, t16 = checks["n=16 d=3"]
    rate16 = z16.evals * z16.paths * z16.heads * z16.n ** 2 / t16  # pair terms per second
    for case in ("default run", "n=2000 d=3"):
        z, t = checks[case]
        old = z.evals * z.paths * z.heads * z.n ** 2 / rate16
        assert old / t > 30, case
        assert 0.5 < timing.predict(z, f)[0] / t < 2.0, case


def test_every_row_once_the_runs_are_seen():
    """With the checks recorded as runs (``wflow run`` keeps every complete run's timing),
    every row of the table, n = 16 … 2000 and d = 2 … 64, is estimated within 2x."""
    rows = table()
    f = timing.fit([(z, t) for _, z, t in rows])
    for case, z, t in rows:
        est, _ = timing.predict(z, f)
        assert 0.5 < est / t < 2.0, case


def test_fixed_costs_are_not_extrapolated_by_n_squared(cache):
    """After one small run, the estimate of n = 2000 is not the small run's rate times n²
    (the fixed part stays fixed) and says it is rough: its pair term was not measured."""
    small = C.resolve(None, ["model.n=16"])
    z = timing.sizes(small)
    t_small = 1.0
    timing.record(small, t_small)
    big = C.resolve(None, ["model.n=2000"])
    est = timing.estimate(big)
    assert est.rough and "rough" in est.how and "pairs/sym3-bands" in est.how
    assert est.seconds < 0.1 * t_small * (2000 / 16) ** 2
    # the small run itself: fitted, close to its timing
    again = timing.estimate(small)
    assert not again.rough and again.seconds == pytest.approx(t_small, rel=0.2)
    assert z.route in ("sym3", "sym3-chain")


def test_no_timing_is_rough_and_says_how_to_calibrate(cache):
    est = timing.estimate(C.resolve(None, []))
    assert est.rough and "--calibrate" in est.how and est.seconds > 0


def test_sizes_count_stages_ledger_records_and_route():
    c = C.resolve(None, ["model.n=300", 'solver.method="rk4"', "solver.T=1"])
    z = timing.sizes(c)
    assert (z.steps, z.evals, z.paths, z.heads, z.n, z.d) == (200, 200 * (4 + 1), 2, 10, 300, 3)
    assert z.records == 41 and z.pair_n == 300 and z.route == "sym3"
    off = timing.sizes(C.resolve(None, ["diagnostics.ledger=false",
                                        "diagnostics.clustering=false", "model.d=2"]))
    assert off.evals == off.steps and off.pair_n == 0 and off.route == "rows"
    assert timing.sizes(C.resolve(None, ['solver.backend="numpy"'])).route == "numpy"


def test_a_new_route_adds_its_terms(monkeypatch):
    """A route registered with its own terms (e.g. a spectral summation, E P H n K) is fitted
    and estimated from them, the fixed terms shared."""
    monkeypatch.setattr(timing, "ROUTE_TERMS", dict(timing.ROUTE_TERMS))
    monkeypatch.setattr(timing, "PRIORS", dict(timing.PRIORS))
    monkeypatch.setattr(timing, "CALIBRATION_CASES", dict(timing.CALIBRATION_CASES))
    modes = 64

    def nk(z):
        return float(z.evals) * z.paths * z.heads * z.n * modes

    timing.register_route_terms(
        "spectral", [timing.Term("eval/spectral", lambda z: float(z.evals)),
                     timing.Term("modes/spectral", nk)],
        {"eval/spectral": 1e-4, "modes/spectral": 1e-8}, calibration=("model.n=4000",))
    assert [t.name for t in timing.terms("spectral")][-2:] == ["eval/spectral",
                                                                "modes/spectral"]
    base = timing.Sizes("spectral", 100, 200, 2, 10, 1000, 3, 21, 0)
    runs = [(base._replace(n=n, steps=s, evals=2 * s), 0.02 * s + 4e-8 * 2 * s * 20 * n * 64)
            for n, s in ((100, 100), (1000, 20), (10_000, 4), (30_000, 2), (500, 300))]
    f = timing.fit(runs)
    assert "modes/spectral" in f.measured
    z = base._replace(n=100_000, steps=3, evals=6)
    est, share = timing.predict(z, f)
    truth = 0.02 * 3 + 4e-8 * 6 * 20 * 100_000 * 64
    assert est == pytest.approx(truth, rel=0.1) and share > timing.FITTED_SHARE
    with pytest.raises(ValueError, match="no prior"):
        timing.register_route_terms("x", [timing.Term("pairs/x", lambda z: 1.0)], {})


def test_run_keeps_its_timing_and_validate_uses_it(cache, capsys, tmp_path, monkeypatch):
    """A complete ``wflow run`` keeps its stepping time in the cache (per machine and CPU);
    runs too short to time are not kept; ``validate`` then says it is fitted."""
    c = C.resolve(None, ["model.n=300", "solver.T=1"])
    timing.record(c, 0.001)  # timer noise: not kept
    assert not timing.costs_file().exists()
    monkeypatch.setattr(timing, "MIN_RECORDED_S", 0.0)
    sets = ["--set", "model.n=40", "--set", "solver.backend=\"numpy\"", "--set", "solver.T=0.5"]
    assert main(["run", "-q", "-o", str(tmp_path / "r.h5"), *sets]) == 0
    saved = json.loads(timing.costs_file().read_text())
    runs = saved[timing.machine_key()]["runs"]
    assert len(runs) == 1 and runs[0]["sizes"]["route"] == "numpy" and runs[0]["sizes"]["n"] == 40
    capsys.readouterr()
    assert main(["validate", *sets]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("time:")][0]
    # the estimate reads the one kept timing ("about" or, when that run's main terms made too
    # small a share of its time on this machine, "roughly"; either way it names the count)
    assert "1 timings" in line and "route numpy" in line, line


@pytest.mark.slow
def test_calibrate_measures_every_route(cache, capsys):
    """``wflow validate --calibrate`` times every calibration case and keeps them: estimates
    of each route are then fitted, not rough."""
    assert main(["validate", "--calibrate"]) == 0
    saved = json.loads(timing.costs_file().read_text())[timing.machine_key()]
    assert len(saved["calibration"]) == len(timing.CALIBRATION_CASES)
    out = capsys.readouterr().out
    assert "time: about " in out and "fitted to" in out
    for d in (2, 3, 8, 64):
        assert not timing.estimate(C.resolve(None, [f"model.d={d}", "model.n=2000"])).rough


def test_human_seconds():
    assert timing.human_seconds(40) == "40 s"
    assert timing.human_seconds(200) == "3.3 min"
    assert timing.human_seconds(3 * 3600) == "3 h"
    assert timing.human_seconds(3 * 86400) == "3 days"
