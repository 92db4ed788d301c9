"""The Section 6 study's interval of the head-count exponent b and the batch-means interval."""

import numpy as np
import pytest

from wflow.lab.studies.section6 import batch_means_ci, power_law_interval

H = np.array([1.0, 10.0, 100.0])


def test_power_law_interval_exact_data():
    """Means exactly a H^b with zero standard errors: the fit returns a and b, width 0."""
    a, b, se, half = power_law_interval(H, 0.4 * H ** -0.9, [0.0, 0.0, 0.0])
    assert a == pytest.approx(0.4, rel=1e-12) and b == pytest.approx(-0.9, abs=1e-12)
    assert half == 0.0 and se == pytest.approx(0.0, abs=1e-12)


def test_power_law_interval_covers_b_at_its_level():
    """10 log-normal paths per H with mean exactly a H^b (relative spreads 0.3, 0.15, 0.1):
    the 95% interval of b, propagated from the t-intervals of the means, covers the true b
    in 95% of 1000 repetitions (binomial SE 0.7%; the delta method and the estimated
    standard errors of 10 paths allow 0.91–0.98). Without the 1/m of the log the interval
    would be far too wide at H = 100 or too narrow at H = 1."""
    rng = np.random.default_rng(3)
    a, b, sig, P = 0.4, -0.9, np.array([0.3, 0.15, 0.1]), 10
    g = a * H[:, None] ** b * np.exp(sig[:, None] * rng.standard_normal((1000, 3, P))
                                     - sig[:, None] ** 2 / 2)
    m, se = g.mean(axis=2), g.std(axis=2, ddof=1) / np.sqrt(P)
    hits = 0
    for mi, si in zip(m, se):
        _, bh, _, half = power_law_interval(H, mi, si)
        hits += abs(bh - b) <= half
    assert 0.91 <= hits / 1000 <= 0.98, hits / 1000


def test_batch_means_ci_covers_the_mean():
    """An AR(1) series (φ = 0.9, 2000 values, blocks of 400 ≫ its correlation time 19):
    the batch-means 95% interval of the time average covers the true mean 0 in 0.91–0.98 of
    800 series, while the naive iid interval (ignoring the correlation) covers far less."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(5)
    phi, n = 0.9, 2000
    e = rng.standard_normal((800, n))
    e[:, 0] /= np.sqrt(1 - phi ** 2)  # start in the stationary law
    xs = lfilter([1.0], [1.0, -phi], e, axis=1)
    hits = sum(abs(x.mean()) <= batch_means_ci(x, blocks=5) for x in xs)
    naive = np.sum(np.abs(xs.mean(axis=1)) <= 1.96 * xs.std(axis=1, ddof=1) / np.sqrt(n))
    assert 0.91 <= hits / 800 <= 0.98, hits / 800
    assert naive / 800 < 0.6
    assert np.isnan(batch_means_ci(np.ones(9), blocks=5))


def test_head_scaling_compare_figure(tmp_path):
    """The cross-sphere figure: one PNG < 300 kB with a series per (sphere, family)."""
    from wflow.lab.figures.section6 import head_scaling_compare

    rows = [dict(sphere=s, family=f, H=list(H), G2=list(0.4 * H ** b), ci=[0.01, np.nan, 1e-4],
                 a=0.4, b=b, b_ci=0.05) for s in ("S²", "S⁴") for f, b in (("ou", -1.0),
                                                                       ("oscillating", 0.0))]
    files = head_scaling_compare(rows, tmp_path, ("png",))
    assert [f.name for f in files] == ["head_scaling_spheres.png"]
    assert 0 < files[0].stat().st_size < 300_000
