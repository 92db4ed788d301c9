r"""The ``asymmetry`` study, its weight process and its closed forms [model §1b].

- :func:`skew_matrices`: :math:`\lVert D\rVert_F = \sqrt d` and
  :math:`\lVert D - D^\top\rVert_F / (2\lVert D\rVert_F) = \alpha` exactly, a rotation on S¹;
- the process by module path, and its bad input (one line naming the key);
- two tokens with α = 1: :math:`\rho(t) = \tanh(t + \operatorname{artanh}\rho_0)` with the
  fourth-order error of RK4; on S¹ at any α the angle law of :func:`two_token_angle_rate`;
- α = 0 is the symmetric flow D = I (the ``phase`` study's) to round-off;
- the quick study: its tables, intervals and figure, and its claim (at β = 4 the pure
  antisymmetric D merges more slowly than α = 1/2, at β = 1 every α merges).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import wflow
from wflow.errors import ConfigError
from wflow.model.processes import get_process
from wflow.studies import available_studies, run_study
from wflow.studies.asymmetry import (
    skew_matrices,
    skew_process,
    two_token_angle_rate,
    two_token_rho,
)


def _two_tokens(alpha, d, beta, dt, T, method="rk4", paths=4, seed=3):
    cfg = {"model": {"d": d, "n": 2, "beta": beta, "heads": 1, "normalization": "head",
                     "sign": "ascent", "values": "identity", "interaction": "general"},
           "init": {"tokens": "uniform", "weights": "gaussian", "per_path_tokens": True,
                    "per_path_weights": True, "seed": seed},
           "weights": {"process": skew_process(alpha)},
           "solver": {"method": method, "dt": dt, "T": T, "record_every": int(round(0.1 / dt)),
                      "paths": paths},
           "diagnostics": {"ledger": False},
           "output": {"store_tokens": True, "store_weights": True}}
    return wflow.simulate(cfg)


# ------------------------------------------------------------------ the weights
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_skew_matrices_norms_and_fraction(d, alpha):
    xi = np.random.default_rng(d).standard_normal((6, d, d))
    D = skew_matrices(xi, alpha)
    fro = np.linalg.norm(D, axis=(-2, -1))
    np.testing.assert_allclose(fro, math.sqrt(d), rtol=1e-14)
    frac = np.linalg.norm(D - np.swapaxes(D, -1, -2), axis=(-2, -1)) / (2 * fro)
    np.testing.assert_allclose(frac, alpha, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose((D + np.swapaxes(D, -1, -2)) / 2,
                               np.broadcast_to(math.sqrt(1 - alpha ** 2) * np.eye(d), D.shape),
                               atol=1e-15)
    if alpha == 0:
        assert np.array_equal(D, np.broadcast_to(np.eye(d), D.shape))
    if d == 2:  # √(1−α²) I ± α J: a rotation
        np.testing.assert_allclose(np.swapaxes(D, -1, -2) @ D, np.broadcast_to(np.eye(2), D.shape),
                                   atol=1e-15)


def test_process_by_module_path():
    cls = get_process(skew_process(0.25))
    assert cls.alpha == 0.25 and cls.accepts_general and cls.deterministic
    assert get_process(skew_process(0.25)) is cls  # made once


@pytest.mark.parametrize("process, over, match", [
    ("wflow.studies.asymmetry:skew_1.5", {}, r"^weights.process = 'wflow.studies.asymmetry:skew_1.5'"),
    ("wflow.studies.asymmetry:skew_x", {}, r"^weights.process = 'wflow.studies.asymmetry:skew_x'"),
    (skew_process(0.5), {"interaction": "symmetric"}, r"^init.weights = 'gaussian': is not symmetric"),
    (skew_process(0.5), {"weights": "identity"}, r"^init.weights: the skew process needs random"),
])
def test_bad_input_is_one_line(process, over, match):
    cfg = {"model": {"d": 2, "n": 4, "interaction": over.get("interaction", "general")},
           "init": {"weights": over.get("weights", "gaussian")},
           "weights": {"process": process},
           "solver": {"T": 0.1, "dt": 0.05, "paths": 1}, "diagnostics": {"ledger": False}}
    with pytest.raises(ConfigError, match=match) as exc:
        wflow.simulate(cfg)
    assert "\n" not in str(exc.value)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("d, beta", [(3, 2.0), (5, 6.0)])
def test_two_tokens_antisymmetric_closed_form(d, beta):
    r"""ρ̇ = 1 − ρ² for any A and β: RK4 against tanh(t + artanh ρ₀), error of fourth order
    (halving Δt divides it by ≈ 16: between 10 and 24)."""
    errs = []
    for dt in (0.04, 0.02):
        r = _two_tokens(1.0, d, beta, dt, 2.0)
        rho = np.einsum("tpd,tpd->tp", r.X[:, :, 0], r.X[:, :, 1])
        exact = two_token_rho(r.t[:, None], rho[0][None, :])
        errs.append(np.max(np.abs(rho - exact)))
    assert errs[1] < 1e-8
    assert 10 < errs[0] / errs[1] < 24


def test_two_tokens_on_the_circle_follow_the_angle_law():
    """S¹, α = 0.6, β = 4: RK4 against the scalar ODE of the angle (scipy, rtol 1e-12)."""
    from scipy.integrate import solve_ivp

    alpha, beta = 0.6, 4.0
    r = _two_tokens(alpha, 2, beta, 0.01, 3.0)
    ang = np.arctan2(r.X[..., 1], r.X[..., 0])  # (records, P, 2)
    Dsign = np.sign(r.D[0, :, 0, 1, 0] - r.D[0, :, 0, 0, 1])  # A = ±J, per system
    for p in range(r.X.shape[1]):
        th = np.unwrap(ang[:, p, 1] - ang[:, p, 0])
        # D = R_{sφ}: with θ measured in the orientation s, the law is the one of A = J
        s = Dsign[p]
        sol = solve_ivp(lambda t, y: two_token_angle_rate(y, alpha, beta), (0, r.t[-1]),
                        [s * th[0]], t_eval=r.t, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(s * th, sol.y[0], atol=1e-7)


def test_alpha_zero_is_the_symmetric_flow():
    """α = 0 (general interaction, Gaussian draws unused) against D = I (symmetric, the
    ``phase`` study's weights): the same tokens to round-off."""
    base = {"model": {"d": 2, "n": 8, "beta": 3.0, "heads": 1, "normalization": "head",
                      "sign": "ascent", "values": "identity"},
            "init": {"tokens": "uniform", "per_path_tokens": True, "seed": 5},
            "solver": {"method": "euler", "dt": 0.05, "T": 3.0, "record_every": 10, "paths": 3},
            "diagnostics": {"ledger": False, "clustering": True},
            "output": {"store_tokens": True}}
    sym = wflow.simulate({**base, "init": {**base["init"], "weights": "identity"},
                          "weights": {"process": "frozen"}})
    gen = wflow.simulate({**base, "model": {**base["model"], "interaction": "general"},
                          "init": {**base["init"], "weights": "gaussian",
                                   "per_path_weights": True},
                          "weights": {"process": skew_process(0.0)}})
    np.testing.assert_allclose(gen.X, sym.X, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(gen.merged_fraction, sym.merged_fraction)


# ------------------------------------------------------------------ the quick study
@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_study("asymmetry", tmp_path_factory.mktemp("asym"), scale="quick")


def test_quick_study_writes_tables_intervals_and_figure(quick):
    assert "asymmetry" in available_studies()
    assert (quick.outdir / "figures" / "asymmetry.png").is_file()
    tab = quick.table
    assert set(tab["placement"]) == {"post", "pre", "ngpt"}
    assert len(tab["alpha"]) == 6 + 4
    text = quick.text
    assert "Kaplan–Meier" in text and "common window" in text
    assert "Resolution check" in text and "FAIL" not in text
    # every finite KM median lies in its band
    for m, lo, hi in zip(tab["km_half"], tab["km_half_lo"], tab["km_half_hi"]):
        if math.isfinite(m):
            assert lo <= m <= hi


def test_quick_study_claim(quick):
    """β = 1: every α merges half its pairs by T; β = 4: α = 1 merges more slowly than α = 1/2
    (its pooled t_1/2 censored or beyond α = 1/2's interval)."""
    tab = quick.table
    rows = {(p, a, b): i for i, (p, a, b) in
            enumerate(zip(tab["placement"], tab["alpha"], tab["beta"]))}
    for a in (0.0, 0.5, 1.0):
        assert math.isfinite(tab["t_half"][rows["post", a, 1.0]])
    half, one = rows["post", 0.5, 4.0], rows["post", 1.0, 4.0]
    assert math.isfinite(tab["t_half_hi"][half])
    t1 = tab["t_half"][one]
    assert not math.isfinite(t1) or t1 > tab["t_half_hi"][half]


# ------------------------------------------------------------------ slow
@pytest.mark.slow
def test_record_times_against_adaptive_events():
    """The study's half-merge times (Euler Δt = 0.05, interpolated between geometric records)
    against the per-path event of adaptive steps (bs32, rtol 1e-6): S¹, n = 32, β = 4,
    α = 0.5, 32 systems, T = 200. The median relative difference of the systems that merge in
    both is below 5 %, and the two Kaplan–Meier bands overlap."""
    from wflow.analysis.intervals import km_median_interval
    from wflow.studies import get_study
    from wflow.studies.asymmetry import _first_time

    study = get_study("asymmetry")
    cfg = study.base("full")
    cfg["model"].update(beta=4.0)
    cfg["weights"] = {"process": skew_process(0.5)}
    cfg["solver"].update(T=200.0, paths=32)
    euler = wflow.simulate(cfg)
    tau_e = _first_time(euler.t, euler.merged_fraction, 0.5)
    ad = {**cfg, "solver": {**cfg["solver"], "method": "bs32", "adaptive": True, "rtol": 1e-6,
                            "atol": 1e-6, "event": "merged_fraction", "event_threshold": 0.5,
                            "event_stop": True, "event_tol": 1e-4}}
    res = wflow.simulate(ad)
    tau_a = np.asarray(res.event_time[-1], dtype=float)
    both = np.isfinite(tau_e) & np.isfinite(tau_a)
    assert both.sum() >= 16
    assert np.median(np.abs(tau_e[both] - tau_a[both]) / tau_a[both]) < 0.05
    ke, ka = km_median_interval(tau_e, 200.0), km_median_interval(tau_a, 200.0)
    assert ke.low <= ka.high and ka.low <= ke.high
