r"""Analysis of results, without plotting: loading a source, late-window averages and the
head-count fit :math:`G^2 \approx a H^b` [model §8]. The confidence intervals are
:mod:`wflow.analysis.intervals`'s (``mean_ci`` is re-exported from there).

A *source* is an HDF5 result path, a :class:`wflow.engine.run.Result`, or a
``(config, arrays[, attrs])`` tuple.
"""

from __future__ import annotations

import math
import os

import numpy as np

from wflow.analysis.intervals import mean_ci
from wflow.errors import ConfigError

__all__ = ["SourceError", "load_source", "fit_power_law", "mean_ci", "head_scaling_data",
           "window_mask"]


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


def window_mask(t, window):
    if window is None:
        return t >= t[-1] / 2
    if np.ndim(window) == 0:
        return t >= float(window)
    lo, hi = window
    return (t >= lo) & (t <= hi)


def _conditional(config, paths):
    from wflow.analysis.intervals import CONDITIONAL_X0_D0

    if paths == 1:
        return "conditional on one path"
    tok = bool(_cfg(config, "init", "per_path_tokens", False))
    w = bool(_cfg(config, "init", "per_path_weights", False))
    return ("" if tok and w else CONDITIONAL_X0_D0 if not (tok or w) else
            "conditional on one X₀" if not tok else "conditional on one D(0)")


def head_scaling_data(sources, window=None, level=0.95):
    r"""Late-window time-averaged :math:`G^2` per head count, with 95% confidence intervals,
    and the exponent b of :math:`aH^b` with its interval (:mod:`wflow.analysis.intervals`).

    For each source: H = ``config["model"]["heads"]``, :math:`G^2` averaged over the
    records with t in the window, one value per path. Sources with the same H are pooled.
    The interval of a mean: :func:`~wflow.analysis.intervals.mean_interval` over paths (3 or
    more), or with one path :func:`~wflow.analysis.intervals.batch_means_interval` of its time
    average (5 blocks; conditional on that path). The interval of b:
    :func:`~wflow.analysis.intervals.power_law_interval`, paired across H when every H has one
    source with the same ``init.seed`` and path count (common random numbers), else with
    the H values independent; one path per H: :func:`~wflow.analysis.intervals.
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
        ``H`` (k,), ``mean`` (k,), ``intervals`` (k :class:`~wflow.analysis.intervals.Interval`),
        ``low``, ``high`` (k,) their bounds (NaN: none), ``ci`` (k,) their half-widths,
        ``paths`` (k,) sample counts, ``samples`` list of per-path averages, ``fit`` the
        :class:`~wflow.analysis.intervals.Interval` of b (``extra["a"]``; None with one H);
        sorted by H.
    """
    from wflow.analysis import intervals as iv

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
