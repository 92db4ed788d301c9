"""The jko study in quick mode: JKO's energy never rises at the largest step (the JKO
inequality), JKO and Euler converge at first order, RK4 beats them at equal Δt, and the
explicit schemes' energy can rise where JKO's cannot."""

import numpy as np
import pytest

from wflow.studies import run_study
from wflow.studies.jko_study import jko_data, max_rise, observed_order


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # no figures here (time); the full run draws and checks them
    return run_study("jko", tmp_path_factory.mktemp("jko"), scale="quick", formats=())


def test_observed_order_recovers_a_power_law():
    dts = np.array([1.0, 0.5, 0.25, 0.125])
    order, se = observed_order(dts, 3.0 * dts**2 * (1 + 1e-3 * np.array([1, -1, 1, -1])))
    assert abs(order - 2.0) < 1e-2 and se < 1e-2
    assert max_rise(np.array([3.0, 2.0, 2.5, 1.0])) == 0.5


def test_quick_jko_claims(quick):
    d = jko_data(quick.data)
    assert set(d) == {"clustering", "spreading"}
    for case, res in d.items():
        runs = res["runs"]
        assert set(runs) == {"euler", "heun", "rk4", "jko"}
        big = runs["jko"][0]
        assert big[0] == 1.0
        # the JKO inequality: the energy never rises at the largest step (descent)
        assert max_rise(big[4]) <= 1e-12 * abs(big[4][0]), case
        # JKO stays on the sphere, errors are finite and positive
        assert all(np.isfinite(r[1]) and r[1] > 0 for m in runs for r in runs[m])
    sp = d["spreading"]["runs"]
    # first order for Euler and JKO: halving Δt roughly halves the error at T
    for m in ("euler", "jko"):
        ratio = sp[m][0][1] / sp[m][1][1]
        assert 1.4 < ratio < 3.0, (m, ratio)
    # fourth order: RK4 gains > 8× per halving and beats Euler by > 10× at equal Δt
    assert sp["rk4"][0][1] / sp["rk4"][1][1] > 8
    assert all(r[1] < 0.1 * e[1] for r, e in zip(sp["rk4"], sp["euler"]))
    # at the largest step an explicit scheme's energy rises in the stiff clustering case
    cl = d["clustering"]["runs"]
    assert max(max_rise(cl[m][0][4]) for m in ("euler", "heun", "rk4")) > 0
    assert d["spreading"]["clusters_T"] > d["clustering"]["clusters_T"]
