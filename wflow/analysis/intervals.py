r"""Confidence intervals, one method per kind of estimand, each labelled the same way in
figures and text.

Every function returns an :class:`Interval`: the estimate, the bounds (NaN when no interval
is given), the level, the method, the number of independent units (paths, systems, blocks)
and, where the units share draws, what the interval is conditional on. Its
:attr:`Interval.label` reads e.g. ``"95% CI, jackknife Student-t, 4 paths"`` or
``"too few paths: no interval"``; figures and summaries print that label and
:meth:`Interval.fmt` (one ± per number).

Methods (coverage measured on log-normal per-path values with :math:`\sigma_{\log} = 0.8`,
correlated across H, ``tests/test_intervals.py``):

============================  ==============================================  ===========
estimand                      method                                          minimum
============================  ==============================================  ===========
mean of a per-path quantity   Student-t on the log scale, CV from the log     3 paths
                              spread (:func:`mean_interval`)
exponent b of :math:`aH^b`    jackknife over paths (paired across H),         3 paths
                              Student-t (:func:`power_law_interval`)
proportion                    Clopper–Pearson (:func:`proportion_interval`)   1 path
censored time (median)        Kaplan–Meier, log-log band crossing ½            5 paths
                              (Brookmeyer–Crowley; :func:`km_median_interval`)
time average along one path   batch means, Student-t (:func:`batch_means_interval`)  5 blocks
smooth function of group means  grouped jackknife, Student-t                   3 per group
                              (:func:`jackknife_interval`)
any other statistic           percentile bootstrap (:func:`bootstrap_interval`)  20 units
statistic of a mean curve     percentile bootstrap, multinomial counts        20 units
(a first-passage time)        (:func:`curve_bootstrap_interval`)
============================  ==============================================  ===========

No percentile or BCa bootstrap below :data:`MIN_BOOTSTRAP` units: with a handful of paths
the bootstrap distribution is the handful itself and its intervals are about half as wide
as honest ones.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Interval", "mean_interval", "power_law_interval", "power_law_from_means",
           "jackknife_interval",
           "proportion_interval",
           "km_median_interval", "batch_means_interval", "bootstrap_interval",
           "curve_bootstrap_interval",
           "mean_ci", "CONDITIONAL_X0_D0", "MIN_PATHS", "MIN_KM", "MIN_BLOCKS", "MIN_BOOTSTRAP"]

#: fewest paths for a Student-t interval of a mean or of b (2 degrees of freedom)
MIN_PATHS = 3
#: fewest paths for a Kaplan–Meier median interval
MIN_KM = 5
#: fewest blocks for a batch-means interval
MIN_BLOCKS = 5
#: fewest units for a percentile bootstrap interval
MIN_BOOTSTRAP = 20
#: what an interval over paths that share one initial state is conditional on
CONDITIONAL_X0_D0 = "conditional on one X₀, D(0)"


@dataclass(frozen=True)
class Interval:
    r"""An estimate with its confidence interval and what the interval means.

    Attributes
    ----------
    estimate, low, high : float
        NaN bounds: no interval (too few units); ``inf``: beyond the observation window.
    level : float
    method : str
        e.g. ``"Student-t"``, ``"jackknife Student-t"``, ``"Clopper–Pearson"``.
    n : int
        Independent units the interval rests on.
    unit : str
        ``"paths"``, ``"systems"``, ``"blocks"``.
    conditional : str
        Empty, or what the units share (e.g. :data:`CONDITIONAL_X0_D0`).
    se : float
        Standard error of the estimate where the method has one (else NaN).
    """

    estimate: float
    low: float
    high: float
    level: float
    method: str
    n: int
    unit: str = "paths"
    conditional: str = ""
    se: float = float("nan")
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def ok(self):
        """True when an interval is given (both bounds not NaN)."""
        return not (math.isnan(self.low) or math.isnan(self.high))

    @property
    def label(self):
        """``"95% CI, <method>, <n> <unit>[, <conditional>]"`` or ``"too few <unit>: no
        interval"``."""
        if not self.ok:
            return f"too few {self.unit} ({self.n}): no interval"
        s = f"{100 * self.level:g}% CI, {self.method}, {self.n} {self.unit}"
        return f"{s}, {self.conditional}" if self.conditional else s

    @property
    def halfwidth(self):
        """Larger distance from the estimate to a bound (NaN without an interval)."""
        if not self.ok:
            return float("nan")
        return max(self.high - self.estimate, self.estimate - self.low)

    def covers(self, value):
        return bool(self.ok and self.low <= value <= self.high)

    def fmt(self, spec=".3g"):
        """``"est [low, high]"`` (``"est (no interval)"`` without one)."""
        e = format(self.estimate, spec)
        if not self.ok:
            return f"{e} (no interval)"
        return f"{e} [{format(self.low, spec)}, {format(self.high, spec)}]"

    def errorbar(self):
        """``(below, above)`` distances for matplotlib's ``yerr``; zeros without an interval."""
        if not self.ok or not math.isfinite(self.estimate):
            return 0.0, 0.0
        return (self.estimate - self.low if math.isfinite(self.low) else 0.0,
                self.high - self.estimate if math.isfinite(self.high) else 0.0)

    def as_tuple(self):
        return self.estimate, self.low, self.high


@functools.lru_cache(maxsize=256)
def _tq(level, df):
    r"""Student-t quantile :math:`t_{(1+\ell)/2,\,\nu}`, ν = ``df`` (cached: asked per interval)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df))


def _clean(sample):
    s = np.asarray(sample, dtype=float).ravel()
    return s[np.isfinite(s)]


# ------------------------------------------------------------------------------- a mean
#: log of the largest double: beyond it exp overflows
_LOG_MAX = math.log(np.finfo(float).max)


def mean_interval(sample, level=0.95, *, unit="paths", conditional=""):
    r"""Mean of a positive per-path quantity with a Student-t interval on the log scale:

    .. math::
        \bar y\,\exp\!\Big(\frac v2 \mp t_{(1+\ell)/2,\,m-1}\sqrt v\Big), \qquad
        v = \frac{\widehat{\mathrm{CV}}^2}{m}, \quad \widehat{\mathrm{CV}}^2 = e^{s_{\log}^2} - 1,

    with :math:`\bar y` the mean of the m values and :math:`s_{\log}` the standard deviation
    of their logarithms. The delta method gives :math:`\operatorname{Var}\log\bar y \approx
    \mathrm{CV}^2/m` and :math:`E\log\bar y \approx \log\mu - \mathrm{CV}^2/(2m)` (the
    shift v/2 undoes that bias). The CV comes from the spread of the logs (a log-normal
    working model), not from :math:`s/\bar y`: with a few right-skewed values the sample SD
    misses the rare large value in most samples and the interval under-covers (σ_log = 0.8,
    m = 10: 91% instead of 95%; this one 94–95%, ``tests/test_intervals.py``). For lighter
    tails than log-normal (gamma) it is conservative (up to 98%). Positive by construction;
    it contains :math:`\bar y` whenever :math:`\sqrt v < 2t`.

    A sample with a value ≤ 0 (not a positive quantity) gets the plain Student-t interval
    :math:`\bar y \mp t\,s/\sqrt m`, and so does a sample whose log-scale interval is not
    representable in floating point: :math:`s_{\log}^2` or
    :math:`\log\bar y + v/2 + t\sqrt v` above :math:`\log(\text{largest double}) \approx
    709.8` (values spread over hundreds of decades, where the log-normal working model says
    nothing useful anyway); its method then reads "Student-t (log-scale spread too large)".

    Parameters
    ----------
    sample : array_like
        One value per path (NaN dropped).
    level : float
    unit, conditional : str
        For the label (:class:`Interval`).

    Returns
    -------
    Interval
        No interval (NaN bounds) below :data:`MIN_PATHS` values; the estimate as both bounds
        when the values do not spread.
    """
    s = _clean(sample)
    m = s.size
    est = float(s.mean()) if m else float("nan")
    nan = float("nan")
    if m < MIN_PATHS:
        return Interval(est, nan, nan, level, "Student-t", m, unit, conditional)
    method = "Student-t"
    if np.all(s > 0):
        slog2 = float(np.log(s).std(ddof=1)) ** 2
        if slog2 < _LOG_MAX:
            cv2 = math.expm1(slog2)
            se = math.sqrt(cv2 / m)  # of log(mean)
            w = _tq(level, m - 1) * se
            c = se ** 2 / 2
            if math.log(est) + c + w < _LOG_MAX:
                return Interval(est, est * math.exp(c - w), est * math.exp(c + w), level,
                                "Student-t (log scale)", m, unit, conditional, se=est * se)
        method = "Student-t (log-scale spread too large)"
    se = float(s.std(ddof=1)) / math.sqrt(m)
    w = _tq(level, m - 1) * se
    return Interval(est, est - w, est + w, level, method, m, unit, conditional, se=se)


def mean_ci(samples, level=0.95):
    r"""Half-width of the plain Student-t interval of a mean,
    :math:`t_{(1+\ell)/2,\,m-1}\, s/\sqrt{m}` over the m values (NaN dropped; NaN when
    m < 2). For quantities of either sign printed as "mean ± half-width" (order parameters,
    rates); a positive, skewed per-path quantity gets :func:`mean_interval`."""
    s = _clean(samples)
    if s.size < 2:
        return float("nan")
    return float(_tq(level, s.size - 1) * s.std(ddof=1) / math.sqrt(s.size))


# ------------------------------------------------------------------------------- a power law
def _slope_weights(H):
    x = np.log(np.asarray(H, dtype=float))
    return (x - x.mean()) / np.sum((x - x.mean()) ** 2)


def power_law_interval(H, samples, level=0.95, *, paired=True, unit="paths", conditional=""):
    r"""Exponent b of :math:`\overline{Y}(H) \approx aH^b`, least squares on the logarithms of
    the means over paths, with a jackknife Student-t interval.

    With :math:`x_k = \log H_k`, :math:`w_k = (x_k - \bar x)/\sum_j (x_j - \bar x)^2` and
    :math:`\bar Y_k` the mean over paths at :math:`H_k`,

    .. math::
        \hat b = \sum_k w_k \log \bar Y_k, \qquad
        \widehat{\mathrm{se}}^2 = \frac{P-1}{P}\sum_{p=1}^{P}\big(\hat b_{(-p)} -
        \hat b_{(\cdot)}\big)^2, \qquad
        \hat b \mp t_{(1+\ell)/2,\,P-1}\,\widehat{\mathrm{se}},

    :math:`\hat b_{(-p)}` the slope with path p left out. ``paired=True``: path p is one
    unit at every H (common random numbers: the same X₀ and D(0) at every H), left out of
    every :math:`\bar Y_k` at once, so the correlation across H enters the variance (a common
    path factor cancels in the slope). ``paired=False``: the H values have their own paths;
    each column's jackknife variance is added (:math:`\sum_k \mathrm{se}^2_k`) and the degrees
    of freedom are the smallest column's P − 1.

    Why the jackknife and not the bootstrap: with 4–10 paths the percentile/BCa bootstrap
    of b is about half as wide as it should be (the resamples only recombine the few
    paths); the jackknife variance is the delta-method variance of a smooth function of
    means, without a distributional model, slightly inflated (its bias is upward), and
    Student-t with P − 1 degrees of freedom accounts for estimating it from P paths.
    Measured coverage at 95% (``tests/test_intervals.py``): 93–95% at P = 4, 10, 30.

    Parameters
    ----------
    H : array_like (K,)
        Head counts (positive, at least two distinct).
    samples : array_like (P, K) when paired; else a sequence of K 1-D arrays
        Positive per-path values.
    level : float
    paired : bool
    unit, conditional : str
        For the label.

    Returns
    -------
    Interval
        ``estimate`` = b; ``extra``: ``a``, ``means`` (K,), ``paths`` (K,), ``se_ls`` (the
        least-squares standard error of the slope through the K means: the misfit of the
        power law, not its Monte Carlo uncertainty). No interval below :data:`MIN_PATHS`
        paths.
    """
    H = np.asarray(H, dtype=float).ravel()
    if paired:
        Y = np.asarray(samples, dtype=float)
        if Y.ndim != 2 or Y.shape[1] != H.size:
            raise ValueError(f"power_law_interval: samples of shape {Y.shape} for {H.size} H")
        cols = list(Y.T)
    else:
        cols = [np.asarray(c, dtype=float).ravel() for c in samples]
        if len(cols) != H.size:
            raise ValueError(f"power_law_interval: {len(cols)} samples for {H.size} H")
    if np.unique(H).size < 2 or np.any(H <= 0):
        raise ValueError("power_law_interval: needs at least two distinct positive H")
    if any(c.size == 0 or not np.all(np.isfinite(c)) or np.any(c <= 0) for c in cols):
        raise ValueError("power_law_interval: samples must be finite and positive")
    w = _slope_weights(H)
    x = np.log(H)
    means = np.array([c.mean() for c in cols])
    b = float(w @ np.log(means))
    a = float(np.exp(np.log(means).mean() - b * x.mean()))
    P = np.array([c.size for c in cols])
    resid = np.log(means) - np.log(a) - b * x
    se_ls = (float(np.sqrt(np.sum(resid ** 2) / (H.size - 2) / np.sum((x - x.mean()) ** 2)))
             if H.size > 2 else float("nan"))
    extra = {"a": a, "means": means, "paths": P, "se_ls": se_ls}
    method = "jackknife Student-t" + ("" if paired else ", H independent")
    nan = float("nan")
    n = int(P.min())
    if n < MIN_PATHS:
        return Interval(b, nan, nan, level, method, n, unit, conditional, extra=extra)
    if paired:
        Yp = np.stack(cols, axis=1)  # (P, K)
        loo = (Yp.sum(axis=0) - Yp) / (n - 1)  # (P, K) means without path p
        bj = np.log(loo) @ w
        var = (n - 1) / n * float(np.sum((bj - bj.mean()) ** 2))
    else:
        var = 0.0
        for k, c in enumerate(cols):  # each column's contribution w_k log(mean_k)
            loo = (c.sum() - c) / (c.size - 1)
            lj = w[k] * np.log(loo)
            var += (c.size - 1) / c.size * float(np.sum((lj - lj.mean()) ** 2))
    se = math.sqrt(var)
    half = _tq(level, n - 1) * se
    return Interval(b, b - half, b + half, level, method, n, unit, conditional, se=se,
                    extra=extra)


def power_law_from_means(H, intervals, level=0.95, *, conditional=""):
    r"""Exponent b of :math:`aH^b` through K means that carry their own independent
    intervals (one path per H: batch means), by the delta method:

    .. math::
        \hat b = \sum_k w_k \log m_k, \qquad
        \widehat{\mathrm{se}}^2 = \sum_k w_k^2 \Big(\frac{s_k}{m_k}\Big)^2, \qquad
        \hat b \mp t_{(1+\ell)/2,\,\nu}\,\widehat{\mathrm{se}},

    :math:`w_k` as in :func:`power_law_interval`, :math:`s_k` the standard errors of the
    :class:`Interval` s and ν the smallest of their degrees of freedom (``n − 1``). The H
    values must be independent (their own noise paths). No interval if one is missing.
    """
    H = np.asarray(H, dtype=float).ravel()
    m = np.array([iv.estimate for iv in intervals], dtype=float)
    se = np.array([iv.se for iv in intervals], dtype=float)
    if np.any(m <= 0):
        raise ValueError("power_law_from_means: the means must be positive")
    w = _slope_weights(H)
    x = np.log(H)
    b = float(w @ np.log(m))
    a = float(np.exp(np.log(m).mean() - b * x.mean()))
    n = min(iv.n for iv in intervals)
    unit = intervals[0].unit
    method = f"{intervals[0].method}, delta method"
    extra = {"a": a, "means": m}
    if not all(iv.ok for iv in intervals) or not np.all(np.isfinite(se)):
        nan = float("nan")
        return Interval(b, nan, nan, level, method, n, unit, conditional, extra=extra)
    sb = float(np.sqrt(np.sum((w * se / m) ** 2)))
    half = _tq(level, n - 1) * sb
    return Interval(b, b - half, b + half, level, method, n, unit, conditional, se=sb,
                    extra=extra)


def jackknife_interval(groups, statistic, level=0.95, *, unit="paths", method=None,
                       conditional=""):
    r"""A smooth statistic of the means of independent groups of values, with the grouped
    jackknife Student-t interval:

    .. math::
        \hat\theta = g(\bar y_1, \dots, \bar y_G), \qquad
        \widehat{\mathrm{se}}^2 = \sum_{c=1}^{G} \frac{m_c-1}{m_c}
        \sum_{i=1}^{m_c}\big(\hat\theta_{c,(-i)} - \hat\theta_{c,(\cdot)}\big)^2, \qquad
        \hat\theta \mp t_{(1+\ell)/2,\,\min_c m_c - 1}\,\widehat{\mathrm{se}},

    :math:`\hat\theta_{c,(-i)}` the statistic with value i of group c left out (the
    groups are independent, so their jackknife variances add). The unpaired case of
    :func:`power_law_interval` is this with :math:`g = \sum_k w_k \log \bar y_k`.

    Parameters
    ----------
    groups : sequence of 1-D arrays
    statistic : callable
        ``statistic(means)`` of the (G,) group means; NaN when undefined.
    """
    cols = [_clean(c) for c in groups]
    means = np.array([c.mean() if c.size else np.nan for c in cols])
    with np.errstate(all="ignore"):
        est = float(statistic(means))
    n = min(c.size for c in cols)
    method = method or "jackknife Student-t"
    nan = float("nan")
    if n < MIN_PATHS or not math.isfinite(est):
        return Interval(est, nan, nan, level, method, n, unit, conditional)
    var = 0.0
    for k, c in enumerate(cols):
        loo = (c.sum() - c) / (c.size - 1)
        th = []
        for v in loo:
            m = means.copy()
            m[k] = v
            with np.errstate(all="ignore"):
                th.append(float(statistic(m)))
        th = np.array(th)
        if not np.all(np.isfinite(th)):
            return Interval(est, nan, nan, level, method, n, unit, conditional)
        var += (c.size - 1) / c.size * float(np.sum((th - th.mean()) ** 2))
    se = math.sqrt(var)
    half = _tq(level, n - 1) * se
    return Interval(est, est - half, est + half, level, method, n, unit, conditional, se=se)


# ------------------------------------------------------------------------------- a proportion
def proportion_interval(k, n, level=0.95, *, unit="paths", conditional=""):
    r"""Proportion :math:`k/n` with the Clopper–Pearson interval: the bounds solve
    :math:`P(X \ge k \mid p_{lo}) = P(X \le k \mid p_{hi}) = (1-\ell)/2`,
    :math:`X \sim \mathrm{Bin}(n, p)` (``scipy.stats.binomtest``). Exact: coverage at least
    ℓ for every p (conservative for small n). No interval when n = 0."""
    from scipy import stats

    k, n = int(k), int(n)
    nan = float("nan")
    if n < 1:
        return Interval(nan, nan, nan, level, "Clopper–Pearson", n, unit, conditional)
    ci = stats.binomtest(k, n).proportion_ci(level)
    return Interval(k / n, float(ci.low), float(ci.high), level, "Clopper–Pearson", n, unit,
                    conditional)


# ------------------------------------------------------------------------------- a censored time
def km_median_interval(times, T, level=0.95, *, unit="paths", conditional=""):
    r"""Kaplan–Meier median of event times right-censored at T (``NaN`` = no event by T),
    with the interval where the pointwise log-log band of :math:`\hat S` crosses ½.

    The median is the smallest event time with :math:`\hat S(t) \le 1/2`; its interval is
    :math:`\{t: \text{the level-}\ell\text{ band of } S(t) \text{ contains } 1/2\}`, the
    Brookmeyer–Crowley construction (inverting the test of :math:`S(t) = 1/2` at each t)
    with the log-log transformed Greenwood band (``scipy.stats.ecdf``). ``inf`` means
    "> T" (not reached). No interval below :data:`MIN_KM` paths.
    """
    import warnings

    from scipy import stats

    times = np.asarray(times, dtype=float).ravel()
    n = times.size
    events = times[np.isfinite(times)]
    n_cens = int(np.sum(~np.isfinite(times)))
    nan, inf = float("nan"), math.inf
    method = "Kaplan–Meier, log-log band"
    if events.size == 0:
        est = inf if n else nan
        lo = inf if n >= MIN_KM else nan
        return Interval(est, lo, lo, level, method, n, unit, conditional)
    res = stats.ecdf(stats.CensoredData(uncensored=events, right=np.full(n_cens, float(T))))
    q, s = res.sf.quantiles, res.sf.probabilities

    def first_below(prob):
        prob = np.nan_to_num(prob, nan=0.0)
        i = np.flatnonzero(prob <= 0.5)
        return float(q[i[0]]) if i.size else inf

    est = first_below(s)
    if n < MIN_KM:
        return Interval(est, nan, nan, level, method, n, unit, conditional)
    with warnings.catch_warnings():  # the band is undefined where S = 0: the bound is then q
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = res.sf.confidence_interval(level, method="log-log")
    return Interval(est, first_below(ci.low.probabilities), first_below(ci.high.probabilities),
                    level, method, n, unit, conditional)


# ------------------------------------------------------------------------------- a time average
def batch_means_interval(series, blocks=MIN_BLOCKS, level=0.95, *, conditional=""):
    r"""Time average of one path's series with the batch-means interval:

    .. math::
        \bar x \mp t_{(1+\ell)/2,\,B-1}\, s_B/\sqrt{B},

    :math:`s_B` the standard deviation of the means of B consecutive equal blocks. Valid
    when a block is much longer than the correlation time (the block means are then nearly
    independent). No interval with fewer than 2 values per block or fewer than
    :data:`MIN_BLOCKS` blocks. It is conditional on the path's own draws (one X₀, D(0),
    one noise path): the time average's uncertainty, not the law over paths.
    """
    x = _clean(series)
    B = int(blocks)
    est = float(x.mean()) if x.size else float("nan")
    nan = float("nan")
    if B < MIN_BLOCKS or x.size < 2 * B:
        return Interval(est, nan, nan, level, "batch means", B, "blocks", conditional)
    m = np.array([b.mean() for b in np.array_split(x, B)])
    se = float(m.std(ddof=1)) / math.sqrt(B)
    half = _tq(level, B - 1) * se
    return Interval(est, est - half, est + half, level, "batch means", B, "blocks",
                    conditional, se=se)


# ------------------------------------------------------------------------------- anything else
def bootstrap_interval(sample, statistic, *, rng, level=0.95, n_resamples=1999, unit="paths",
                       conditional=""):
    r"""Percentile bootstrap interval of ``statistic`` over the units: the
    :math:`(1\mp\ell)/2` quantiles of :math:`\hat\theta(x^*_b)` over ``n_resamples``
    resamples with replacement. For statistics without a closed-form interval (a between-
    path SD, a censored half-time); no interval below :data:`MIN_BOOTSTRAP` units (with a
    few units the resamples only recombine them and the interval is too narrow).

    ``statistic(x, axis=-1)`` must be vectorised over the leading axes.
    """
    s = _clean(sample)
    m = s.size
    est = float(statistic(s, axis=-1)) if m else float("nan")
    nan = float("nan")
    if m < MIN_BOOTSTRAP:
        return Interval(est, nan, nan, level, "percentile bootstrap", m, unit, conditional)
    idx = rng.integers(0, m, size=(n_resamples, m))
    tb = statistic(s[idx], axis=-1)
    lo, hi = np.quantile(tb, [(1 - level) / 2, (1 + level) / 2])
    return Interval(est, float(lo), float(hi), level, "percentile bootstrap", m, unit,
                    conditional, se=float(np.std(tb, ddof=1)))


def curve_bootstrap_interval(curves, statistic, *, rng, level=0.95, n_resamples=1000,
                             unit="systems", conditional="", censored_at=None):
    r"""Percentile bootstrap interval of a statistic of the mean curve over units.

    ``curves`` (k, m) holds one curve per unit (column); the estimate is
    ``statistic(F)`` of the mean curve :math:`F = \frac1m\sum_p c_p`. A resample draws
    multinomial counts :math:`w_b` of the m units, :math:`F_b = \frac1m\sum_p w_{bp} c_p`
    (all resamples in one product: the curves are not copied per resample), and the interval
    is the :math:`(1\mp\ell)/2` quantiles of ``statistic(F_b)``. ``statistic`` maps
    (B, k) to (B,), NaN for a censored value (e.g. a first-passage time not reached by
    ``censored_at``, the end of the window): a censored replicate counts as larger than any
    observed one, and a bound beyond ``censored_at`` is ``inf``. No interval below
    :data:`MIN_BOOTSTRAP` units.
    """
    c = np.asarray(curves, dtype=float)
    m = c.shape[1]
    est = float(statistic(c.mean(axis=1))[0])
    nan = float("nan")
    if m < MIN_BOOTSTRAP:
        return Interval(est, nan, nan, level, "percentile bootstrap", m, unit, conditional)
    W = rng.multinomial(m, np.full(m, 1.0 / m), size=n_resamples)
    tb = statistic(W @ c.T / m)
    if censored_at is not None:
        big = 2.0 * float(censored_at) + 1.0  # stands for +inf inside the quantiles
        tb = np.where(np.isnan(tb), big, tb)
    q = np.quantile(tb, [(1 - level) / 2, (1 + level) / 2], method="linear")
    if censored_at is not None:
        q = [np.inf if x > censored_at else x for x in q]
    return Interval(est, float(q[0]), float(q[1]), level, "percentile bootstrap", m, unit,
                    conditional)
