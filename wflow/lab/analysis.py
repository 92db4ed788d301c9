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

__all__ = ["SourceError", "load_source", "fit_power_law", "head_scaling_data", "window_mask"]


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


def head_scaling_data(sources, window=None):
    r"""Late-window time-averaged :math:`G^2` per head count, with 95% confidence intervals.

    For each source: H = ``config["model"]["heads"]``, :math:`G^2` averaged over the
    records with t in the window, one value per path. Sources with the same H are
    pooled (their paths are treated as independent samples). The interval is the
    Student-t 95% interval of the mean over paths (NaN with a single path).

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
        ``H`` (k,), ``mean`` (k,), ``ci`` (k,) half-widths, ``paths`` (k,) sample
        counts, ``samples`` list of per-path averages; sorted by H.
    """
    from scipy import stats

    if not sources:
        raise SourceError("head_scaling: no sources given")
    per_H = {}
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
    Hs = np.array(sorted(per_H), dtype=float)
    samples = [np.asarray(per_H[int(h)]) for h in Hs]
    mean = np.array([s.mean() for s in samples])
    ci = np.array([stats.t.ppf(0.975, s.size - 1) * s.std(ddof=1) / math.sqrt(s.size)
                   if s.size > 1 else np.nan for s in samples])
    return {"H": Hs, "mean": mean, "ci": ci, "paths": np.array([s.size for s in samples]),
            "samples": samples}
