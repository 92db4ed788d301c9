"""The adaptive mode of the ``phase`` study (``--set solver.adaptive=true``, [model §6d]):
its grid and settings, the default (fixed-step, GLPR-matched) grid untouched, and the quick
adaptive run: t_1/2 grows with β, and the pooled fraction of the dense outputs agrees with
records taken on step ends."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.engine.run import simulate
from wflow.studies import StudyOptions, get_study, run_study
from wflow.studies.phase import ADAPTIVE, PHASE_BASE, Phase, half_time, pooled_fraction

ON = ("solver.adaptive=true",)


def test_default_grid_is_the_fixed_step_one():
    tasks = get_study("phase").tasks(StudyOptions())
    assert len(tasks) == 2 * len(Phase.betas) + 2 * len(Phase.resolution_betas)
    for _, cfg in tasks:
        s = cfg["solver"]
        assert s["method"] == "euler" and not s.get("adaptive", False)
        assert s["paths"] == PHASE_BASE["solver"]["paths"] and s["T"] == 30.0
        assert s.get("record_times", "uniform") == "uniform"


def test_adaptive_grid_and_settings():
    tasks = get_study("phase").tasks(StudyOptions(overrides=ON))
    assert len(tasks) == 2 * len(Phase.betas)  # no Δt/2 runs
    assert sorted({c["model"]["beta"] for _, c in tasks}) == list(Phase.betas)
    assert max(Phase.betas) == 9.0
    for _, cfg in tasks:
        s = cfg["solver"]
        assert {k: s[k] for k in ADAPTIVE["full"]} == ADAPTIVE["full"]
        assert (s["method"], s["paths"], s["T"], s["records"]) == ("dopri5", 256, 1e3, 400)
    over = get_study("phase").tasks(StudyOptions(overrides=ON + ("solver.paths=8",)))
    assert {c["solver"]["paths"] for _, c in over} == {8}  # the user's overrides win


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_study("phase", tmp_path_factory.mktemp("phase-adaptive"), scale="quick",
                     overrides=ON, formats=())


def test_quick_adaptive_half_merge_time_grows_with_beta(quick):
    tab = quick.table
    rows = sorted(range(len(tab["beta"])), key=lambda i: tab["beta"][i])
    est = [tab["t_half"][i] if np.isfinite(tab["t_half"][i]) else np.inf for i in rows]
    assert np.isfinite(est[0])
    assert all(a < b for a, b in zip(est, est[1:])), est
    assert "error control" in quick.text and "FAIL" not in quick.text


def test_dense_output_records_agree_with_step_end_records(quick):
    """β = 3, the quick systems: records from each path's Hermite interpolant against the
    same run stepping exactly onto the record times. Both carry O(rtol) errors; a pair flips
    across the 0.999 threshold between them only when it sits within ~1e-6 of it, so the
    per-system fractions agree on all but a few (record, system) entries and t_1/2 moves by
    far less than its bootstrap half-width."""
    cfg = next(c for _, c in quick.data.tasks if c["model"]["beta"] == 3.0)
    a = simulate(cfg)
    b = simulate(cfg, overrides=["solver.stop_at_records=true"])
    np.testing.assert_array_equal(a["t"], b["t"])
    fa, fb = np.asarray(a["merged_fraction"]), np.asarray(b["merged_fraction"])
    assert np.mean(np.abs(fa - fb) > 0) < 0.01
    ta = half_time(a["t"], pooled_fraction(fa)[0])[0]
    tb = half_time(b["t"], pooled_fraction(fb)[0])[0]
    i = next(i for i in range(len(quick.table["beta"])) if quick.table["beta"][i] == 3.0)
    assert ta == pytest.approx(quick.table["t_half"][i], abs=0.0)  # the study's own value
    assert abs(ta - tb) < 0.05 * (quick.table["t_half_hi"][i] - quick.table["t_half_lo"][i])
