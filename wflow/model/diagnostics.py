r"""Clustering diagnostics of a token cloud [model §8], batched over paths.

Every function takes tokens ``X`` of shape (P, n, d) and returns (P,).
The O(n²) ones (clusters, smallest cosine) subsample ``max_n`` tokens (the first
``max_n``, deterministic) above ``max_n``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "order_parameter",
    "min_cosine",
    "merged_fraction",
    "n_clusters",
    "variance",
    "spectral_rank",
    "clustering_series",
    "CLUSTERING_NAMES",
    "w2_geodesic",
    "geodesic",
    "geodesic_pairwise",
    "anova_split",
    "ANOVA_PARTS",
]

CLUSTERING_NAMES = ("order_parameter", "min_cosine", "n_clusters", "variance", "spectral_rank")


def order_parameter(X):
    r""":math:`|\bar x|`, :math:`\bar x = \frac1n\sum_i x_i` (1 for a single point cluster)."""
    return np.linalg.norm(np.asarray(X).mean(axis=-2), axis=-1)


def variance(X):
    r"""Within-sequence variance :math:`\frac1n\sum_i |x_i - \bar x|^2 = 1 - |\bar x|^2` on the sphere."""
    X = np.asarray(X)
    return np.mean(np.sum((X - X.mean(axis=-2, keepdims=True)) ** 2, axis=-1), axis=-1)


def _pairs(X, max_n, cos_cluster=np.inf, cos_merge=np.inf):
    """(min cosine, components, merged pairs i < j) per path of the first ``max_n`` tokens, in
    one pass over the pairs (:func:`wflow.kernels.pair_statistics`), and m."""
    from wflow.kernels import pair_statistics

    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64)[..., :max_n, :])
    return pair_statistics(X, float(cos_cluster), float(cos_merge)), X.shape[-2]


def min_cosine(X, max_n=2000):
    r""":math:`\min_{i,j}\langle x_i, x_j\rangle` (1 when fully collapsed)."""
    return _pairs(X, max_n)[0][0]


def merged_fraction(X, threshold=0.999, max_n=2000):
    r"""Fraction of ordered pairs :math:`i \ne j` that have merged:

    .. math:: f(X) = \frac{1}{n(n-1)} \#\{(i, j) : i \ne j,\ \langle x_i, x_j\rangle > c\},

    with :math:`c` = ``threshold`` (``diagnostics.merge_cosine``). 0 for tokens further apart
    than :math:`\arccos c`, 1 for one point cluster; a configuration of :math:`k` clusters
    of :math:`m_1, \dots, m_k` coincident tokens (and distinct clusters) has
    :math:`f = \sum_a m_a(m_a - 1) / (n(n-1))`. Above ``max_n`` tokens the first ``max_n``
    are used.
    """
    (_, _, merged), m = _pairs(X, max_n, cos_merge=threshold)
    return _ordered_fraction(merged, m)


def _ordered_fraction(pairs, m):
    """Merged pairs i < j as a fraction of the m(m − 1) ordered pairs i ≠ j."""
    return 2 * pairs / (m * (m - 1))


def n_clusters(X, angle=0.1, max_n=2000):
    r"""Number of connected components of the graph :math:`\langle x_i, x_j\rangle \ge \cos\alpha`.

    Union–find over the pairs i < j in one pass that forms no Gram matrix
    (:func:`wflow.kernels.pair_statistics`): O(n²) per path (scipy's sparse
    ``connected_components`` took ≈ 2 ms per record at n = 200, P = 2, 13% of a default run).
    Above ``max_n`` tokens the first ``max_n`` are used.
    """
    return _pairs(X, max_n, cos_cluster=np.cos(angle))[0][1].astype(float)


#: a cloud whose variance per token is below ``(ROUNDOFF_SPREAD * eps)**2`` times its mean
#: squared norm is one point up to round-off: its principal components are those of the
#: rounding errors, so :func:`spectral_rank` is undefined (NaN) there
ROUNDOFF_SPREAD = 64.0


def spectral_rank(X, frac=0.99):
    r"""Number of principal components of the centred cloud needed for ``frac`` of its variance.

    .. math::

        r = \min\{k : \textstyle\sum_{j \le k} s_j^2 \ge \text{frac}\,\sum_j s_j^2\},

    :math:`s_j` the singular values of :math:`X - \bar x`. NaN (undefined) for a collapsed
    cloud, whose variance is at the level of round-off (:data:`ROUNDOFF_SPREAD`): its
    components would be those of the rounding errors.
    """
    X = np.asarray(X)
    Xc = X - X.mean(axis=-2, keepdims=True)
    s2 = np.linalg.svd(Xc, compute_uv=False) ** 2  # (P, min(n, d)), batched
    tot = s2.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        below = np.cumsum(s2, axis=-1) / tot < frac - 1e-12
    out = np.count_nonzero(below, axis=-1) + 1.0
    scale = np.mean(np.sum(X * X, axis=-1), axis=-1)  # mean squared norm (1 on the sphere)
    eps = np.finfo(X.dtype if X.dtype.kind == "f" else np.float64).eps
    collapsed = tot[..., 0] / X.shape[-2] <= (ROUNDOFF_SPREAD * eps) ** 2 * scale
    out[collapsed] = np.nan
    return out


#: the parts of :func:`anova_split`, in the order they add up to ``total``
ANOVA_PARTS = ("within_sequence", "between_sequence", "between_class")


def anova_split(X, labels):
    r"""Token-weighted Euclidean ANOVA of a batch of sequences (one sequence per path).

    For P sequences of n tokens :math:`x_{pi}` in :math:`\mathbb R^d` with class labels
    :math:`c(p)`, the sequence means :math:`m_p = \frac1n\sum_i x_{pi}`, the class means
    :math:`\mu_c = \frac1{P_c}\sum_{c(p) = c} m_p` and the grand mean
    :math:`\bar x = \frac1P\sum_p m_p`:

    .. math::
        \underbrace{\frac1{Pn}\sum_{p,i}|x_{pi} - \bar x|^2}_{\text{total}}
        = \underbrace{\frac1{Pn}\sum_{p,i}|x_{pi} - m_p|^2}_{\text{within sequence}}
        + \underbrace{\frac1P\sum_p|m_p - \mu_{c(p)}|^2}_{\text{between sequence, within class}}
        + \underbrace{\sum_c\frac{P_c}{P}|\mu_c - \bar x|^2}_{\text{between class}} ,

    an identity (every token has weight 1/(Pn); the cross terms vanish because each part is
    centred within the next coarser group).

    Parameters
    ----------
    X : (..., P, n, d) tokens (leading axes, e.g. records, are kept).
    labels : (P,) class labels (any hashable values).

    Returns
    -------
    dict with ``total`` and the :data:`ANOVA_PARTS`, each of shape ``X.shape[:-3]``.
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(labels)
    if X.ndim < 3 or labels.shape != (X.shape[-3],):
        raise ValueError(f"anova_split: X has shape {X.shape}, labels {labels.shape}: expected "
                         "X (..., P, n, d) and labels (P,)")
    _, inv = np.unique(labels, return_inverse=True)
    C = int(inv.max()) + 1
    m = X.mean(axis=-2)  # (..., P, d)
    grand = m.mean(axis=-2, keepdims=True)
    counts = np.bincount(inv, minlength=C).astype(float)
    onehot = np.eye(C)[inv]  # (P, C)
    mu = np.einsum("pc,...pd->...cd", onehot, m) / counts[:, None]  # (..., C, d)
    total = np.mean(np.sum((X - grand[..., None, :]) ** 2, axis=-1), axis=(-1, -2))
    within = np.mean(np.sum((X - m[..., None, :]) ** 2, axis=-1), axis=(-1, -2))
    between_seq = np.mean(np.sum((m - mu[..., inv, :]) ** 2, axis=-1), axis=-1)
    between_class = np.sum(counts / counts.sum() * np.sum((mu - grand) ** 2, axis=-1), axis=-1)
    return {"total": total, "within_sequence": within, "between_sequence": between_seq,
            "between_class": between_class}


def clustering_series(X, angle=0.1, max_n=2000, merge_cosine=None):
    """All clustering diagnostics as a dict of (P,) arrays; with ``merge_cosine`` also
    ``merged_fraction``. The pairwise ones come from one pass over the pairs."""
    cm = np.inf if merge_cosine is None else merge_cosine
    (low, comps, merged), m = _pairs(X, max_n, np.cos(angle), cm)
    out = {
        "order_parameter": order_parameter(X),
        "min_cosine": low,
        "n_clusters": comps.astype(float),
        "variance": variance(X),
        "spectral_rank": spectral_rank(X),
    }
    if merge_cosine is not None:
        out["merged_fraction"] = _ordered_fraction(merged, m)
    return out


def clustering_statistic(X, name, angle=0.1, max_n=2000, merge_cosine=None):
    """``clustering_series(X, angle, max_n, merge_cosine)[name]``, computing that one
    statistic only (the same calls on the same input: the same bits); for the per-path
    events of adaptive runs [model §6d]."""
    if name in ("min_cosine", "n_clusters", "merged_fraction"):
        cm = np.inf if merge_cosine is None else merge_cosine
        (low, comps, merged), m = _pairs(X, max_n, np.cos(angle), cm)
        if name == "merged_fraction":
            if merge_cosine is None:
                raise KeyError(name)
            return _ordered_fraction(merged, m)
        return low if name == "min_cosine" else comps.astype(float)
    return {"order_parameter": order_parameter, "variance": variance,
            "spectral_rank": spectral_rank}[name](X)


def geodesic(X, Y):
    r"""Great-circle distance of matched rows, stable at every angle:

    .. math:: d_S(x, y) = 2\operatorname{atan2}(|\hat x - \hat y|,\ |\hat x + \hat y|)
        = \operatorname{atan2}(|x \wedge y|, \langle x, y\rangle),\qquad \hat x = x/|x|,

    since :math:`|\hat x - \hat y| = 2\sin(\theta/2)`, :math:`|\hat x + \hat y| = 2\cos(\theta/2)`
    (so :math:`|x\wedge y| = |\hat x-\hat y|\,|\hat x+\hat y|/2`). The difference of two
    nearby vectors is exact in floating point, so the absolute error is that of the inputs'
    own rounding onto the sphere, :math:`\sim 10^{-16}` (relative :math:`10^{-16}/\theta`),
    at every angle; :math:`\arccos\langle x, y\rangle` returns 0 below
    :math:`\theta \approx 10^{-8}`, where :math:`\cos\theta` rounds to 1.

    Parameters
    ----------
    X, Y : arrays (..., d), broadcastable, nonzero rows.

    Returns
    -------
    array (...), angles in [0, π].
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    X = X / np.linalg.norm(X, axis=-1, keepdims=True)
    Y = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    return 2.0 * np.arctan2(np.linalg.norm(X - Y, axis=-1), np.linalg.norm(X + Y, axis=-1))


#: entries (rows × columns × d) of one block of :func:`geodesic_pairwise`
_BLOCK = 1 << 21


def geodesic_pairwise(X, Y):
    r"""The matrix :math:`C_{ij} = d_S(x_i, y_j)` of :func:`geodesic` (stable form), computed in
    row blocks of at most ``_BLOCK`` entries; X (n, d), Y (m, d) -> (n, m)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    n, m, d = len(X), len(Y), X.shape[-1]
    out = np.empty((n, m))
    rows = max(1, _BLOCK // max(1, m * d))
    for a in range(0, n, rows):
        out[a:a + rows] = geodesic(X[a:a + rows, None, :], Y[None, :, :])
    return out


def w2_geodesic(X, Y, return_plan=False):
    r"""Wasserstein-2 distance between the empirical measures of X (n, d) and Y (m, d) on the
    sphere with the geodesic cost :math:`c(x, y) = d_S(x, y)^2` (POT, exact network simplex):

    .. math:: W_2(\mu, \nu)^2 = \min_{\gamma \in \Pi(\mu,\nu)} \sum_{ij} \gamma_{ij}\, d_S(x_i, y_j)^2 .

    The cost uses the stable :func:`geodesic` (not :math:`\arccos\langle x, y\rangle`, which
    rounds to 0 below :math:`\sim 10^{-8}`), so distances down to round-off are resolved.
    """
    import ot

    C = geodesic_pairwise(X, Y) ** 2
    a = np.full(len(C), 1.0 / len(C))
    b = np.full(C.shape[1], 1.0 / C.shape[1])
    plan = ot.emd(a, b, C)
    w2 = float(np.sqrt(max(np.sum(plan * C), 0.0)))
    return (w2, plan) if return_plan else w2


def transport_cost(a, b, C):
    r"""The optimal transport cost :math:`\min_{\pi\in\Pi(a, b)} \sum_{ij} \pi_{ij} C_{ij}` by
    POT's network simplex (``ot.emd2``, exact up to round-off); wflow's studies reach POT
    through this function and :func:`circle_w2_squared`.

    Raises ``RuntimeError`` when the solver reports a problem (iteration limit, infeasible).
    """
    import ot

    cost, log = ot.emd2(a, b, C, numItermax=10**9, log=True)
    if log.get("warning"):
        raise RuntimeError(f"ot.emd2: {log['warning']}")
    return float(cost)


def circle_w2_squared(u, v, w_u=None, w_v=None):
    r""":math:`W_2^2` on the circle of circumference 1 between the columns of ``u`` (n, B) and
    ``v`` (m, B), coordinates in [0, 1) (weights of the same shapes, None: uniform), by
    ``ot.wasserstein_circle`` (p = 2, binary search in the shift stopped at 1e-9); shape (B,)."""
    import ot

    return np.asarray(ot.wasserstein_circle(u, v, w_u, w_v, p=2, eps=1e-9), dtype=float)
