r"""Analysis of results, without plotting: loading a source, late-window averages and the
head-count fit :math:`G^2 \approx a H^b` [model §8].

A *source* is an HDF5 result path, a :class:`wflow.engine.run.Result`, or a
``(config, arrays[, attrs])`` tuple.
"""

from __future__ import annotations

import math
import os

import numpy as np

from wflow.errors import ConfigError

__all__ = ["SourceError", "load_source", "fit_power_law", "power_law_bootstrap", "mean_ci",
           "log_mean_interval", "bootstrap_ci", "head_scaling_data", "window_mask"]


class SourceError(ConfigError):
    """The source lacks what an analysis or figure needs (a :class:`ValueError`; one line)."""


def load_source(src):
    """``(config, arrays)`` from a path, a Result, or a ``(config, arrays[, attrs])`` tuple."""
    if isinstance(src, (str, os.PathLike)):
        try:
            from wflow.storage.io import read
        except ImportError as e:  # pragma: no cover - io.py is written separately
            raise SourceError(
                f"cannot read {str(src)!r}: wflow.storage.io is not available ({e})"
            ) from None
        config, arrays = read(src)[:2]
    elif hasattr(src, "config") and hasattr(src, "arrays"):
        config, arrays = src.config, src.arrays
    elif isinstance(src, (tuple, list)) and len(src) in (2, 3) and isinstance(src[0], dict):
        config, arrays = src[0], src[1]
    else:
        raise TypeError(
            "source must be an HDF5 path, a wflow Result or a (config, arrays) pair, "
            f"got {type(src).__name__}"
        )
    if "t" not in arrays:
        raise SourceError("the source has no time series 't'")
    return dict(config or {}), arrays


def _cfg(config, section, key, default=None):
    return (config.get(section) or {}).get(key, default)


def _series(arrays, name, kind, hint=""):
    """Series ``name`` as a float array (records, P); SourceError if absent or all NaN."""
    if name not in arrays:
        raise SourceError(f"{kind}: the source has no series {name!r}{hint}")
    a = np.asarray(arrays[name], dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if not np.any(np.isfinite(a)):
        raise SourceError(f"{kind}: series {name!r} is all NaN{hint}")
    return a


def _time(arrays):
    return np.asarray(arrays["t"], dtype=float)


# ----------------------------------------------------------------------------- output
def fit_power_law(H, G2):
    r"""Least-squares fit of :math:`G^2 = aH^b` on log–log axes.

    Fits :math:`\log G^2 = \log a + b\log H` by ordinary least squares.

    Parameters
    ----------
    H : array_like
        Head counts (positive; at least two distinct values).
    G2 : array_like
        Positive values, same length.

    Returns
    -------
    a : float
    b : float
    b_stderr : float
        Standard error of the slope from the residuals (NaN with two points).
    """
    H = np.asarray(H, dtype=float).ravel()
    G2 = np.asarray(G2, dtype=float).ravel()
    if H.shape != G2.shape:
        raise SourceError(f"fit_power_law: H and G2 differ in length ({H.size} vs {G2.size})")
    ok = np.isfinite(H) & np.isfinite(G2)
    if np.any((H[ok] <= 0) | (G2[ok] <= 0)):
        raise SourceError("fit_power_law: H and G2 must be positive for a log–log fit")
    x, y = np.log(H[ok]), np.log(G2[ok])
    if np.unique(x).size < 2:
        raise SourceError("fit_power_law: needs at least two distinct head counts H")
    xm = x.mean()
    sxx = np.sum((x - xm) ** 2)
    b = float(np.sum((x - xm) * (y - y.mean())) / sxx)
    loga = float(y.mean() - b * xm)
    dof = x.size - 2
    if dof > 0:
        rss = float(np.sum((y - loga - b * x) ** 2))
        stderr = math.sqrt(rss / dof / sxx)
    else:
        stderr = float("nan")
    return math.exp(loga), b, stderr


def _ls_slope(x, y):
    """Least-squares slope of ``y`` (..., K) on ``x`` (K,) along the last axis."""
    xc = x - x.mean()
    return np.sum(xc * (y - y.mean(axis=-1, keepdims=True)), axis=-1) / np.sum(xc ** 2)


def power_law_bootstrap(H, samples, *, paired, rng, level=0.95, n_resamples=4999,
                        method="BCa"):
    r"""Fit :math:`G^2 = aH^b` to per-H means, with a bootstrap confidence interval for b.

    With :math:`x_k = \log H_k` and :math:`y_k = \log \bar Y_k`,
    :math:`\bar Y_k = \frac1{m_k}\sum_{p} Y_{pk}` the mean over the Monte Carlo paths at
    :math:`H_k`,

    .. math::
        \hat b = \frac{\sum_k (x_k - \bar x)(y_k - \bar y)}{\sum_k (x_k - \bar x)^2},
        \qquad \hat a = \exp(\bar y - \hat b\,\bar x),

    the least-squares line through the logarithms of the means (the mean is fitted, not the
    mean of the logarithms: :math:`\hat b` estimates the exponent of :math:`E[G^2]`). The
    interval is the bootstrap interval of :math:`\hat b` (default BCa,
    :func:`scipy.stats.bootstrap`) over the paths:

    - ``paired=True``: path p at every H is one sample (the H values share random numbers:
      common random numbers across the grid, :func:`wflow.lab.sweep.expand_grid` with
      ``streams="common"``). A resample draws path indices and keeps the whole row
      :math:`(Y_{p1},\dots,Y_{pK})`, so the correlation across H is kept;
    - ``paired=False``: the H values are independent; each column is resampled on its own.

    Parameters
    ----------
    H : array_like, shape (K,)
        Head counts (positive, at least two distinct).
    samples : array_like (P, K) or sequence of K 1-D arrays
        Per-path values (late-window means), positive. Paired needs equal path counts.
    paired : bool
    rng : numpy.random.Generator
        The resampling stream (explicit, seeded by the caller).
    level : float
    n_resamples : int
    method : {"BCa", "percentile", "basic"}

    Returns
    -------
    dict
        ``a``, ``b``, ``low``, ``high`` (the interval of b; NaN when fewer than 3 paths at
        some H or when every resample gives the same b), ``se`` (bootstrap standard error
        of b), ``se_ls`` (least-squares standard error, :func:`fit_power_law`), ``level``,
        ``method``, ``paired``, ``paths`` (K,) and ``means`` (K,).
    """
    from scipy import stats

    H = np.asarray(H, dtype=float).ravel()
    cols = ([np.asarray(c, dtype=float).ravel() for c in np.asarray(samples, dtype=float).T]
            if paired else [np.asarray(c, dtype=float).ravel() for c in samples])
    if len(cols) != H.size:
        raise SourceError(f"power_law_bootstrap: {H.size} head counts but {len(cols)} samples")
    if any(c.size == 0 or np.any(~np.isfinite(c)) or np.any(c <= 0) for c in cols):
        raise SourceError("power_law_bootstrap: samples must be finite and positive")
    means = np.array([c.mean() for c in cols])
    a, b, se_ls = fit_power_law(H, means)
    x = np.log(H)
    out = {"a": a, "b": b, "low": np.nan, "high": np.nan, "se": np.nan, "se_ls": se_ls,
           "level": level, "method": method, "paired": bool(paired),
           "paths": np.array([c.size for c in cols]), "means": means}
    if min(c.size for c in cols) < 3:
        return out

    if all(np.ptp(c) == 0 for c in cols):  # no spread: every resample gives b
        out.update(low=b, high=b, se=0.0)
        return out
    if paired:  # resample path indices, a statistic over them (scipy's paired=True is slow)
        Y = np.stack(cols, axis=-1)  # (P, K)

        def slope_idx(idx, axis=-1):
            return _ls_slope(x, np.log(Y[np.asarray(idx, dtype=int)].mean(axis=-2)))

        data, stat = (np.arange(Y.shape[0]),), slope_idx
    else:
        def slope(*cs, axis=-1):
            return _ls_slope(x, np.log(np.stack([np.mean(c, axis=axis) for c in cs], -1)))

        data, stat = tuple(cols), slope
    with np.errstate(all="ignore"):
        res = stats.bootstrap(data, stat, vectorized=True, n_resamples=n_resamples,
                              confidence_level=level, method=method, rng=rng)
    out.update(low=float(res.confidence_interval.low), high=float(res.confidence_interval.high),
               se=float(res.standard_error))
    return out


def bootstrap_ci(sample, statistic=np.mean, *, rng, level=0.95, n_resamples=4999,
                 method="BCa"):
    r"""Bootstrap interval (default BCa) of ``statistic`` of one sample over its values:
    ``(estimate, low, high)``; NaN bounds with fewer than 3 values, the estimate itself as
    both bounds when the sample has no spread."""
    from scipy import stats

    s = np.asarray(sample, dtype=float).ravel()
    est = float(statistic(s))
    if s.size < 3:
        return est, np.nan, np.nan
    if np.ptp(s) == 0:
        return est, est, est

    def stat(v, axis=-1):
        return statistic(v, axis=axis)

    with np.errstate(all="ignore"):
        res = stats.bootstrap((s,), stat, vectorized=True, n_resamples=n_resamples,
                              confidence_level=level, method=method, rng=rng)
    return est, float(res.confidence_interval.low), float(res.confidence_interval.high)


def log_mean_interval(samples, level=0.95):
    r"""Student-t interval of a positive mean on the log scale (delta method):

    .. math::
        \bar y \exp\!\big(\mp t_{(1+\ell)/2,\,m-1}\,\frac{s}{\sqrt m\,\bar y}\big),

    with :math:`\bar y`, s the mean and standard deviation of the m samples. Always
    positive (unlike :math:`\bar y \pm t s/\sqrt m`). Returns ``(mean, low, high)``;
    NaN bounds when m < 3 (one degree of freedom gives t = 12.7: no useful interval)."""
    from scipy import stats

    s = np.asarray(samples, dtype=float).ravel()
    s = s[np.isfinite(s)]
    m = float(s.mean()) if s.size else float("nan")
    if s.size < 3 or not m > 0:
        return m, float("nan"), float("nan")
    w = stats.t.ppf(0.5 + level / 2, s.size - 1) * s.std(ddof=1) / math.sqrt(s.size) / m
    return m, m * math.exp(-w), m * math.exp(w)


def mean_ci(samples, level=0.95):
    r"""Half-width of the Student-t interval of the mean,
    :math:`t_{(1+\ell)/2,\,m-1}\, s/\sqrt{m}` over the m samples (NaN when m < 2)."""
    from scipy import stats

    s = np.asarray(samples, dtype=float).ravel()
    s = s[np.isfinite(s)]
    if s.size < 2:
        return float("nan")
    return float(stats.t.ppf(0.5 + level / 2, s.size - 1) * s.std(ddof=1) / math.sqrt(s.size))


def window_mask(t, window):
    if window is None:
        return t >= t[-1] / 2
    if np.ndim(window) == 0:
        return t >= float(window)
    lo, hi = window
    return (t >= lo) & (t <= hi)


def _conditional(config, paths):
    from wflow.lab.intervals import CONDITIONAL_X0_D0

    if paths == 1:
        return "conditional on one path"
    tok = bool(_cfg(config, "init", "per_path_tokens", False))
    w = bool(_cfg(config, "init", "per_path_weights", False))
    return ("" if tok and w else CONDITIONAL_X0_D0 if not (tok or w) else
            "conditional on one X₀" if not tok else "conditional on one D(0)")


def head_scaling_data(sources, window=None, level=0.95):
    r"""Late-window time-averaged :math:`G^2` per head count, with 95% confidence intervals,
    and the exponent b of :math:`aH^b` with its interval (:mod:`wflow.lab.intervals`).

    For each source: H = ``config["model"]["heads"]``, :math:`G^2` averaged over the
    records with t in the window, one value per path. Sources with the same H are pooled.
    The interval of a mean: :func:`~wflow.lab.intervals.mean_interval` over paths (3 or
    more), or with one path :func:`~wflow.lab.intervals.batch_means_interval` of its time
    average (5 blocks; conditional on that path). The interval of b:
    :func:`~wflow.lab.intervals.power_law_interval`, paired across H when every H has one
    source with the same ``init.seed`` and path count (common random numbers), else with
    the H values independent; one path per H: :func:`~wflow.lab.intervals.
    power_law_from_means` on the batch means. Each interval says whether it is conditional
    on a shared X₀, D(0) (``init.per_path_tokens``/``per_path_weights`` false).

    Parameters
    ----------
    sources : list
        Paths, Results or (config, arrays) pairs.
    window : None, float or (float, float)
        None: :math:`t \ge T/2` with T the last record time; a float :math:`t_0`:
        :math:`t \ge t_0`; a pair: :math:`t_0 \le t \le t_1`.

    Returns
    -------
    dict
        ``H`` (k,), ``mean`` (k,), ``intervals`` (k :class:`~wflow.lab.intervals.Interval`),
        ``low``, ``high`` (k,) their bounds (NaN: none), ``ci`` (k,) their half-widths,
        ``paths`` (k,) sample counts, ``samples`` list of per-path averages, ``fit`` the
        :class:`~wflow.lab.intervals.Interval` of b (``extra["a"]``; None with one H);
        sorted by H.
    """
    from wflow.lab import intervals as iv

    if not sources:
        raise SourceError("head_scaling: no sources given")
    per_H, series, cfgs = {}, {}, {}
    for src in sources:
        config, arrays = load_source(src)
        H = _cfg(config, "model", "heads", None)
        if H is None:
            raise SourceError("head_scaling: a source has no model.heads in its configuration")
        t = _time(arrays)
        G2 = _series(arrays, "G2", "head_scaling")
        m = window_mask(t, window)
        if not np.any(m):
            raise SourceError(f"head_scaling: no records in the window {window!r} "
                                 f"(records span t = {t[0]:g}..{t[-1]:g})")
        per_H.setdefault(int(H), []).extend(np.nanmean(G2[m], axis=0).tolist())
        series[int(H)] = G2[m, 0]
        cfgs.setdefault(int(H), []).append(config)
    Hs = np.array(sorted(per_H), dtype=float)
    samples = [np.asarray(per_H[int(h)]) for h in Hs]
    ivs = []
    for h, s in zip(Hs, samples):
        cond = _conditional(cfgs[int(h)][0], s.size)
        if s.size == 1:
            ivs.append(iv.batch_means_interval(series[int(h)], level=level, conditional=cond))
        else:
            ivs.append(iv.mean_interval(s, level, conditional=cond))
    fit = None
    if Hs.size >= 2 and all(s.size >= 1 for s in samples) and all(x.estimate > 0 for x in ivs):
        if all(s.size == 1 for s in samples):
            fit = iv.power_law_from_means(Hs, ivs, level, conditional=ivs[0].conditional)
        else:
            seeds = {_cfg(c, "init", "seed", 0) for h in Hs for c in cfgs[int(h)]}
            paired = (len(seeds) == 1 and all(len(cfgs[int(h)]) == 1 for h in Hs)
                      and len({s.size for s in samples}) == 1)
            Y = np.stack(samples, axis=1) if paired else samples
            fit = iv.power_law_interval(Hs, Y, level, paired=paired,
                                        conditional=ivs[0].conditional)
    return {"H": Hs, "mean": np.array([x.estimate for x in ivs]), "intervals": ivs,
            "low": np.array([x.low for x in ivs]), "high": np.array([x.high for x in ivs]),
            "ci": np.array([x.halfwidth for x in ivs]),
            "paths": np.array([s.size for s in samples]), "samples": samples, "fit": fit}
