"""The ``regimes`` study: its per-path columns, the Kaplan–Meier median, the step rule and
the quick mode (a frozen-identity ascent cell collapses to one cluster, descent does not)."""

import math
from pathlib import Path

import numpy as np
import pytest

from wflow.studies import run_study
from wflow.studies.regimes import (
    C_STEP,
    DT_MAX,
    G2_FLOOR,
    RECORD_DT,
    cell_dt,
    g2_decay_rate,
    km_median,
    one_cluster_fraction,
    parse_name,
    time_to_one_cluster,
    weight_norm,
)


# ---------------------------------------------------------------------------------- columns
def test_time_to_one_cluster_is_the_first_record_with_one_cluster():
    t = np.arange(0.0, 5.0, 0.5)
    a = np.array([
        [9, 5, 3, 1, 1, 1, 1, 1, 1, 1],  # one cluster from t = 1.5 on
        [9, 5, 1, 2, 2, 1, 1, 1, 1, 1],  # first at t = 1.0, splits, merges again: the first
        [9, 8, 7, 6, 5, 4, 3, 2, 2, 2],  # never: censored (NaN)
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],  # already at t = 0
    ], dtype=float).T
    tau = time_to_one_cluster(t, a, 4.5)
    np.testing.assert_array_equal(tau[[0, 1, 3]], [1.5, 1.0, 0.0])
    assert np.isnan(tau[2])


def test_g2_decay_rate_of_an_exponential_and_a_constant():
    t = np.linspace(0.0, 10.0, 101)
    lam = np.array([0.7, 0.0, -0.2])
    a = 3.0 * np.exp(-np.outer(t, lam))
    np.testing.assert_allclose(g2_decay_rate(t, a, 10.0), lam, atol=1e-10)
    # records under the rounding floor are left out: the rate of the part above it
    b = np.where(t < 8.0, np.exp(-2.0 * t), 0.1 * G2_FLOOR)[:, None]
    np.testing.assert_allclose(g2_decay_rate(t, b, 10.0), [2.0], rtol=1e-9)
    # fewer than three late records above the floor: undefined
    assert np.isnan(g2_decay_rate(t, np.zeros((t.size, 1)), 10.0)[0])


# ---------------------------------------------------------------------------------- per cell
def test_km_median_hand_checked():
    # S = 4/5, 3/5, 2/5 at t = 1, 2, 3 (two paths censored at T = 5): the median is 3
    m, lo, hi = km_median([1.0, 2.0, 3.0, np.nan, np.nan], 5.0)
    assert m == 3.0 and lo <= m <= hi
    # S = 3/4 at t = 1, 1/2 at t = 2: the first t with S <= 1/2 is 2
    assert km_median([2.0, np.nan, 1.0, np.nan], 5.0)[0] == 2.0
    # S = 3/4, then stays above 1/2: "> T"
    assert km_median([1.0, np.nan, np.nan, np.nan], 5.0)[0] == math.inf
    assert km_median([np.nan] * 5, 5.0) == (math.inf, math.inf, math.inf)
    # fewer than 5 paths: the median, no interval
    m, lo, hi = km_median([np.nan] * 3, 5.0)
    assert m == math.inf and math.isnan(lo) and math.isnan(hi)


def test_km_median_with_censoring_at_T_is_an_order_statistic():
    """All censoring at T (after every event): Ŝ(t) = 1 − #{τ ≤ t}/P, so the median is the
    ⌈P/2⌉-th smallest event time when there are that many, else > T."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        P = int(rng.integers(2, 12))
        tau = rng.uniform(0.0, 10.0, P).round(1)
        tau[rng.random(P) < 0.4] = np.nan
        ev = np.sort(tau[np.isfinite(tau)])
        k = math.ceil(P / 2)
        want = ev[k - 1] if ev.size >= k else math.inf
        m, lo, hi = km_median(tau, 10.0)
        assert m == want, (tau, m, want)
        assert lo <= m <= hi or (P < 5 and math.isnan(lo) and math.isnan(hi))


def test_one_cluster_fraction_clopper_pearson():
    # k = 0 of P: the exact upper bound solves (1 - p)^P = 0.025
    f, lo, hi = one_cluster_fraction([np.nan] * 4)
    assert f == 0.0 and lo == 0.0
    assert hi == pytest.approx(1 - 0.025 ** 0.25, rel=1e-6)
    f, lo, hi = one_cluster_fraction([1.0, 2.0, np.nan, 3.0])
    assert f == 0.75 and lo < 0.75 < hi


# ---------------------------------------------------------------------------------- step rule
@pytest.mark.parametrize("beta", [0.25, 1.0, 4.0, 16.0])
@pytest.mark.parametrize("w", ["frozen_identity", "frozen_random", "ou8", "osc_spread"])
def test_cell_dt_is_the_largest_step_under_the_bound(beta, w):
    norm = weight_norm(w)
    dt, m = cell_dt(beta, norm, C_STEP, RECORD_DT, DT_MAX)
    assert m * dt == pytest.approx(RECORD_DT, rel=1e-12)
    assert beta * norm * dt <= C_STEP * (1 + 1e-12) and dt <= DT_MAX * (1 + 1e-12)
    if m > 1:  # one step fewer per record would break one of the two bounds
        big = RECORD_DT / (m - 1)
        assert beta * norm * big > C_STEP or big > DT_MAX


def test_weight_norm_estimates():
    assert weight_norm("frozen_identity") == 1.0
    # OU: |M| + sqrt(2d) σ with σ² = g²/(2λ) = 4 for g² = 8, λ = 1
    assert weight_norm("ou8") == pytest.approx(1.0 + math.sqrt(6.0) * 2.0)
    # Ξ + Ξᵀ in d = 3: diagonal N(0, 4), so the norm is at least |entry| ~ 1.6 on average,
    # and at most the Frobenius norm, E ≈ sqrt(3·4 + 6·2) ≈ 4.9 per head
    assert 2.0 < weight_norm("frozen_random", H=1) < 4.9
    # oscillating: the periodic solution has diagonal 2 + O(1) and trace 6 (d = 3)
    assert 2.0 < weight_norm("osc_shared") < 4.5


# ---------------------------------------------------------------------------------- quick mode
def test_quick_mode_ascent_collapses_descent_does_not(tmp_path):
    """Quick mode (n = 16, β = 1/4, frozen I, T = 8): under ascent every path reaches one
    cluster (Kaplan–Meier median < T, order parameter ≈ 1); under descent no path does
    (the tokens spread over S²); and the halved Δt gives the same numbers within their
    intervals (the KM median has none with 4 paths)."""
    res = run_study("regimes", tmp_path, scale="quick", formats=())
    tab = res.table
    rows = {parse_name(p)[1] + ("-half" if parse_name(p)[4] else ""): i
            for i, p in enumerate(tab["point"])}
    T = tab["T"][rows["ascent"]]
    asc, des, half = rows["ascent"], rows["descent"], rows["ascent-half"]
    assert tab["frac_one"][asc] == 1.0
    assert tab["km_median"][asc] < T
    assert tab["n_clusters"][asc] == 1.0 and tab["order_parameter"][asc] > 0.999
    assert tab["frac_one"][des] == 0.0 and tab["km_median"][des] == math.inf
    assert tab["n_clusters"][des] > 8 and tab["order_parameter"][des] < 0.1
    # 4 paths: the Kaplan–Meier median has no interval (fewer than 5), the others do
    assert math.isnan(tab["km_median_lo"][asc]) and math.isnan(tab["km_median_hi"][asc])
    for s in ("order_parameter", "G2", "G2_decay", "w2_speed"):
        hw = (tab[f"{s}_hi"][asc] - tab[f"{s}_lo"][asc]) / 2
        assert abs(tab[s][half] - tab[s][asc]) < hw, s
    assert tab["beta"][asc] * tab["dt"][asc] <= C_STEP


def test_heat_maps_from_a_table(tmp_path):
    """One figure per sign and the joint slice, PNG under 300 kB; "> T" and NaN cells drawn."""
    from wflow.figures.regimes import PANELS, draw
    from wflow.studies.regimes import Regimes

    rows = [(n, s, b, w) for s in ("descent", "ascent") for b in (1.0, 4.0)
            for w in ("frozen_identity", "ou2") for n in ("head",)]
    rows += [("joint", s, 4.0, w) for s in ("descent", "ascent") for w in ("frozen_identity", "ou2")]
    rng = np.random.default_rng(0)
    table = {k: [] for k in ("point", "normalization", "sign", "beta", "weights", "halved", "T")}
    for s in Regimes.stats:
        for suffix in ("", "_lo", "_hi"):
            table[s + suffix] = []
    for n, s, b, w in rows:
        for k, v in zip(("point", "normalization", "sign", "beta", "weights", "halved", "T"),
                        (f"regimes-{n}-{s}-b{b:g}-{w}", n, s, b, w, False, 20.0)):
            table[k].append(v)
        for st in Regimes.stats:
            v = float(rng.uniform(0.1, 1.0))
            v = math.inf if st == "km_median" and b == 4.0 else v
            v = math.nan if st == "G2_decay" and w == "ou2" and b == 1.0 else v
            for suffix in ("", "_lo", "_hi"):
                table[st + suffix].append(v)
    files = draw(table, tmp_path, ("png",))
    names = sorted(p.name for p in files)
    assert names == ["regimes_ascent.png", "regimes_descent.png", "regimes_joint_slice.png"]
    assert all(0 < p.stat().st_size < 300_000 for p in files)
    assert len(PANELS) == len(Regimes.stats)


def test_heat_maps_share_one_scale_per_statistic(tmp_path, monkeypatch):
    """One cell per figure (the quick study's shape): one cluster in one figure and sixteen
    in another get different colours, from one colour scale per statistic across figures."""
    from wflow.figures import _figbase
    from wflow.figures.regimes import PANELS, draw
    from wflow.studies.regimes import Regimes

    figs = []  # the figures as built, not drawn (drawn: test_heat_maps_from_a_table)
    monkeypatch.setattr(_figbase, "_save", lambda fig, outdir, kind, formats, **k: figs.append(fig)
                        or [Path(outdir) / f"{kind}.{fmt}" for fmt in formats])
    keys = ("point", "normalization", "sign", "beta", "weights", "halved", "T")
    table = {k: [] for k in keys}
    table.update({s + x: [] for s in Regimes.stats for x in ("", "_lo", "_hi")})
    for sign, clusters in (("descent", 1.0), ("ascent", 16.0)):
        for k, v in zip(keys, (f"r-{sign}", "head", sign, 1.0, "ou2", False, 2.0)):
            table[k].append(v)
        for st in Regimes.stats:
            v = clusters if st == "n_clusters" else 0.5
            for x in ("", "_lo", "_hi"):
                table[st + x].append(v)
    draw(table, tmp_path, ("png",))
    k = list(PANELS).index("n_clusters")
    ims = [fig.axes[k].images[0] for fig in figs]  # the panels first, then the colour bars
    assert len(ims) == 2
    assert ims[0].norm.vmin == ims[1].norm.vmin == 1.0 and ims[0].norm.vmax == 16.0
    colours = [im.cmap(im.norm(im.get_array()[0, 0])) for im in ims]
    assert colours[0] != colours[1]


def test_ou_halving_cells_get_a_pathwise_partner():
    """Every OU halving cell has a Δt run with noise_refine = 2 beside its Δt/2 run (same
    seed, same Brownian path: tests/test_weights.py), and the refined run is a check run,
    not a cell of the map."""
    from wflow import config as C
    from wflow.studies import get_study
    from wflow.studies.regimes import is_refined

    st = get_study("regimes")
    tasks = dict(st.variants(st.base("full"), "full"))
    refs = [k for k in tasks if is_refined(k)]
    assert refs and all(parse_name(k)[4] for k in refs)
    for k in refs:
        cell, half = tasks[k[:-len("-refdt")]], tasks[k[:-len("-refdt")] + "-halfdt"]
        ref = C.validate(tasks[k])
        assert ref["weights"]["process"] == "ou" and ref["weights"]["noise_refine"] == 2
        assert ref["solver"]["dt"] == cell["solver"]["dt"] == 2 * half["solver"]["dt"]
        assert C.validate(half)["weights"]["noise_refine"] == 1
        assert ref["init"]["seed"] == C.validate(half)["init"]["seed"]
