"""The ``phase`` study and its series ``merged_fraction`` [model §8].

- ``merged_fraction`` on analytic configurations (clusters of coincident tokens, a regular
  polygon, pairs on either side of the threshold), and as a recorded series;
- the pooling: the study's F(t) is the merged ordered pairs of all systems over P n(n − 1),
  its SE the standard error of the per-system fractions;
- ``half_time`` on a piecewise-linear F, censoring, and the bootstrap interval;
- the batched ``n_clusters`` / ``spectral_rank`` against per-path computations;
- the quick mode's claim: t_1/2 grows with β for β ≥ 1, with separated intervals, and its
  Δt-halving check passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

import wflow
from wflow.model import diagnostics as dg
from wflow.storage.io import read
from wflow.studies import StudyData, available_studies, run_study
from wflow.studies.phase import Phase, half_time, half_time_interval
from wflow.sweeps.sweep import run_sweep


def _circle(angles):
    a = np.asarray(angles, dtype=float)
    return np.stack([np.cos(a), np.sin(a)], axis=-1)


# ------------------------------------------------------------------ merged_fraction
def test_merged_fraction_clusters_of_coincident_tokens():
    """k clusters of m_a coincident tokens: f = Σ m_a(m_a − 1) / (n(n − 1))."""
    rng = np.random.default_rng(1)
    sizes = [5, 3, 1, 7]
    centres = _circle(np.arange(4) * np.pi / 2)  # distinct clusters, cosines 0 and −1
    X = np.repeat(centres, sizes, axis=0)[rng.permutation(sum(sizes))]
    n = len(X)
    expected = sum(m * (m - 1) for m in sizes) / (n * (n - 1))
    got = dg.merged_fraction(X[None])
    assert got.shape == (1,)
    assert got[0] == pytest.approx(expected, rel=1e-15)
    # one point cluster: every pair; spread-out tokens (regular 12-gon): none
    assert dg.merged_fraction(np.repeat(X[:1], 9, axis=0)[None])[0] == 1.0
    assert dg.merged_fraction(_circle(np.arange(12) * 2 * np.pi / 12)[None])[0] == 0.0


def test_merged_fraction_threshold_is_strict_and_per_path():
    """Two tokens at angle θ merge iff cos θ > c; each path is counted on its own."""
    c = 0.999
    theta = np.arccos(c)
    near = _circle([0.0, 0.98 * theta, 2.0, 2.0 + 1.02 * theta])  # one merged pair of two
    X = np.stack([near, _circle([0.0, 0.0, 0.0, 3.0])])  # path 1: three coincident tokens
    got = dg.merged_fraction(X, threshold=c)
    np.testing.assert_allclose(got, [2 / 12, 6 / 12], rtol=1e-15)
    assert dg.merged_fraction(X, threshold=np.cos(1.5 * theta))[0] == pytest.approx(4 / 12)


def test_merged_fraction_is_recorded_with_the_configured_threshold():
    """The series equals the function on the stored tokens at every record, and follows
    ``diagnostics.merge_cosine``."""
    cfg = {"model": {"d": 3, "n": 12, "beta": 4.0, "heads": 1, "sign": "ascent",
                     "values": "identity"},
           "init": {"tokens": "vmf", "kappa": 30.0, "weights": "identity",
                    "per_path_tokens": True},
           "weights": {"process": "frozen"},
           "solver": {"dt": 0.05, "T": 1.0, "record_every": 5, "paths": 3},
           "diagnostics": {"ledger": False, "merge_cosine": 0.99}}
    res = wflow.simulate(cfg)
    assert res.merged_fraction.shape == (len(res.t), 3)
    want = np.stack([dg.merged_fraction(X, 0.99) for X in res.X])
    np.testing.assert_array_equal(res.merged_fraction, want)
    assert res.merged_fraction[-1].max() > res.merged_fraction[0].min()  # merging happens


# ------------------------------------------------------------------ batched diagnostics
def _n_clusters_per_path(X, angle):
    return np.array([connected_components(csr_matrix(x @ x.T >= np.cos(angle)),
                                          directed=False)[0] for x in X], dtype=float)


def _clustered_clouds(rng, P, n, d, centres, spreads):
    """P clouds of n unit tokens around ``centres`` random centres, each cloud with one of
    ``spreads`` (from one point cluster per centre to no clusters)."""
    C = rng.standard_normal((P, centres, d))
    lab = rng.integers(0, centres, (P, n))
    X = np.take_along_axis(C, lab[..., None], 1) + rng.standard_normal((P, n, d)) * \
        rng.choice(spreads, (P, 1, 1))
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


@pytest.mark.parametrize("n", [6, 32, 130])
def test_n_clusters_batched_equals_per_path(n):
    X = _clustered_clouds(np.random.default_rng(n), 40, n, 3, 5, [1e-3, 0.03, 0.06, 1.0])
    got = dg.n_clusters(X, 0.1)
    np.testing.assert_array_equal(got, _n_clusters_per_path(X, 0.1))
    assert len(set(got)) > 3  # the cases differ


@pytest.mark.parametrize("d", [2, 3, 5])
def test_pair_statistics_one_pass_against_the_gram_matrix(d):
    """The one-pass pair statistics (no Gram matrix) against NumPy's Gram matrix: the smallest
    cosine (diagonal included) within 2·d·u (two d-term dot products of unit rows), the
    components against scipy and the merged pairs i < j at thresholds from empty to full;
    ``clustering_series`` gives the same values as the separate functions."""
    from wflow.kernels import pair_statistics

    n = 90
    X = _clustered_clouds(np.random.default_rng(d), 12, n, d, 4, [1e-4, 0.02, 0.1, 1.0])
    G = X @ np.swapaxes(X, 1, 2)
    iu = np.triu_indices(n, 1)
    seen = set()
    for cc, cm in [(0.995, 0.9999), (0.9, 0.99), (-2.0, -2.0), (2.0, 2.0)]:
        low, comps, merged = pair_statistics(X, cc, cm)
        # unit rows: each d-term dot product is within d·u of the exact one, either order
        np.testing.assert_allclose(low, G.min(axis=(1, 2)), rtol=0, atol=2 * d * 2.0**-53)
        want = [connected_components(csr_matrix(g >= cc), directed=False)[0] for g in G]
        np.testing.assert_array_equal(comps, want)
        np.testing.assert_array_equal(merged, [(g[iu] > cm).sum() for g in G])
        seen.update(comps.tolist())
    assert {1, n} <= seen and len(seen) > 4
    out = dg.clustering_series(X, 0.1, 2000, 0.999)
    np.testing.assert_array_equal(out["merged_fraction"], dg.merged_fraction(X, 0.999))
    np.testing.assert_array_equal(out["n_clusters"], dg.n_clusters(X, 0.1))
    np.testing.assert_array_equal(out["min_cosine"], dg.min_cosine(X))
    assert "merged_fraction" not in dg.clustering_series(X, 0.1)


def test_n_clusters_chain_and_spectral_rank():
    """A chain of tokens 0.05 apart (angle 0.06) is one cluster whatever its order; tokens on
    a great circle of S² have spectral rank 2; a point cluster, exact or collapsed to within
    round-off (a cloud whose PCA would be that of the rounding errors), has none (NaN)."""
    rng = np.random.default_rng(0)
    X = _circle(0.05 * np.arange(100))[rng.permutation(100)]
    assert dg.n_clusters(X[None], 0.06)[0] == 1
    assert dg.n_clusters(X[None], 0.04)[0] == 100
    Y = np.concatenate([X, np.zeros((100, 1))], axis=1)[None]
    assert dg.spectral_rank(Y)[0] == 2
    assert np.isnan(dg.spectral_rank(np.repeat(Y[:, :1], 5, axis=1))[0])
    p = np.array([0.6, 0.0, 0.8])
    noisy = p + 1e-16 * rng.standard_normal((3, 50, 3))  # one point up to round-off
    noisy /= np.linalg.norm(noisy, axis=-1, keepdims=True)
    assert np.isnan(dg.spectral_rank(noisy)).all()
    tight = p + 1e-9 * rng.standard_normal((3, 50, 3))  # a tiny but real cloud: defined
    assert np.isfinite(dg.spectral_rank(tight)).all()


# ------------------------------------------------------------------ t_1/2
def test_half_time_interpolates_and_censors():
    t = np.linspace(0.0, 10.0, 11)
    F = np.clip(0.1 * t - 0.23, 0, 1)  # crosses 1/2 at t = 7.3
    assert half_time(t, F)[0] == pytest.approx(7.3, rel=1e-12)
    assert np.isnan(half_time(t, 0.4 * F)[0])  # never reaches 1/2
    both = half_time(t, np.stack([F, 0.4 * F, np.full(11, 0.6)]))
    np.testing.assert_allclose(both, [7.3, np.nan, 0.0])


def test_half_time_interval_bootstrap():
    """Identical systems: a degenerate interval at t_1/2; spread systems: the interval
    contains the estimate and shrinks like 1/√P."""
    t = np.linspace(0.0, 10.0, 101)
    rng = np.random.default_rng(3)
    same = np.repeat(np.clip(0.1 * t - 0.23, 0, 1)[:, None], 50, axis=1)
    iv = half_time_interval(t, same, rng)
    lo, hi = iv.low, iv.high
    assert iv.label == "95% CI, percentile bootstrap, 50 systems"
    assert lo == pytest.approx(7.3) and hi == pytest.approx(7.3)
    widths = []
    for P in (100, 1600):
        shifts = rng.uniform(-2, 2, P)
        f = np.clip(0.1 * (t[:, None] - shifts) - 0.23, 0, 1)
        est = half_time(t, f.mean(axis=1))[0]
        lo, hi = half_time_interval(t, f, rng).as_tuple()[1:]
        assert lo <= est <= hi
        widths.append(hi - lo)
    assert 2.5 < widths[0] / widths[1] < 6.5  # ≈ 4 = √(1600/100)


# ------------------------------------------------------------------ pooling
def test_pooled_fraction_is_all_merged_pairs_over_all_pairs(tmp_path):
    """F(t) = (merged ordered pairs of all systems) / (P n(n − 1)), counted from the stored
    tokens; SE = standard deviation of the per-system fractions / √P."""
    study = Phase()
    base = study.base("quick")
    base["model"].update(n=10, beta=2.0)
    base["solver"].update(T=2.0, paths=6, record_every=10)
    base["output"]["store_tokens"] = True
    tasks = [("phase-d=2-beta=2", base)]
    sweep = run_sweep(tasks, tmp_path, columns=study.summary_columns)
    data = StudyData([str(tmp_path / "phase-d=2-beta=2.h5")], tasks,
                     {k: np.asarray(v) for k, v in sweep.table.items()})
    c = study.curves(data)[(2, 2.0, base["solver"]["dt"])]
    X = read(data.paths[0])[1]["X"]  # (records, P, n, d)
    n, P = 10, 6
    G = np.einsum("rpia,rpja->rpij", X, X)
    off = ~np.eye(n, dtype=bool)
    merged = ((G > 0.999) & off).sum(axis=(2, 3))  # (records, P)
    np.testing.assert_allclose(c["F"], merged.sum(axis=1) / (P * n * (n - 1)), rtol=1e-13)
    per = merged / (n * (n - 1))
    np.testing.assert_allclose(c["se"], per.std(axis=1, ddof=1) / np.sqrt(P), rtol=1e-12)
    assert c["F"][-1] > 0  # something merged, so the check is not vacuous
    np.testing.assert_allclose(data.column("merged_final"), per[-1], rtol=1e-15)


# ------------------------------------------------------------------ the quick mode
@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_study("phase", tmp_path_factory.mktemp("phase"), scale="quick",
                     formats=("png",))


def test_phase_is_listed_with_a_question(capsys):
    from wflow.cli import main

    s = available_studies()["phase"]
    assert "β" in s.question and "\n" not in s.question
    assert main(["study", "list"]) == 0
    assert any("phase" in ln and s.question in ln for ln in capsys.readouterr().out.splitlines())


def test_quick_half_merge_time_grows_with_beta(quick):
    """The claim: for β ≥ 1, t_1/2 grows with β; each 95% interval lies above the previous
    one (a censored t_1/2, F < 1/2 up to T, counts as larger than T)."""
    tab = quick.table
    rows = [i for i in range(len(tab["beta"])) if not tab["halved_dt"][i]]
    rows.sort(key=lambda i: tab["beta"][i])
    betas = [tab["beta"][i] for i in rows]
    assert betas == sorted(Phase.quick_betas) and all(b >= 1 for b in betas)
    T = quick.data.config(quick.data.tasks[0][0])["solver"]["T"]
    est = [tab["t_half"][i] if np.isfinite(tab["t_half"][i]) else np.inf for i in rows]
    lo = [tab["t_half_lo"][i] for i in rows]
    hi = [tab["t_half_hi"][i] for i in rows]
    assert np.isfinite(est[0]) and est[0] < T  # the smallest β does merge half its pairs
    for a in range(len(rows) - 1):
        assert est[a] < est[a + 1], (betas, est)
        assert hi[a] < lo[a + 1] or not np.isfinite(est[a + 1]), (betas, lo, hi)


def test_quick_resolution_check_passes(quick):
    """t_1/2 with Δt halved changes by less than the half-width of its interval."""
    lines = [ln for ln in quick.text.splitlines() if ln.strip().endswith(("pass", "FAIL"))]
    assert lines and all(ln.strip().endswith("pass") for ln in lines), quick.text
    tab = quick.table
    halved = [i for i in range(len(tab["beta"])) if tab["halved_dt"][i]]
    assert halved
    for i in halved:
        j = next(j for j in range(len(tab["beta"])) if not tab["halved_dt"][j]
                 and tab["beta"][j] == tab["beta"][i] and tab["d"][j] == tab["d"][i])
        hw = 0.5 * (tab["t_half_hi"][j] - tab["t_half_lo"][j])
        assert abs(tab["t_half"][i] - tab["t_half"][j]) < hw


def test_quick_figure(quick):
    pngs = [p for p in quick.files if str(p).endswith(".png")]
    assert pngs and all(0 < p.stat().st_size < 300_000 for p in pngs)
