r"""Clustering diagnostics of a token cloud [model §8], batched over paths.

Every function takes tokens ``X`` of shape (P, n, d) and returns (P,).
The O(n²) ones (clusters, smallest cosine) subsample ``max_n`` tokens (the first
``max_n``, deterministic) above ``max_n``.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

__all__ = [
    "order_parameter",
    "min_cosine",
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


def min_cosine(X, max_n=2000):
    r""":math:`\min_{i,j}\langle x_i, x_j\rangle` (1 when fully collapsed)."""
    X = np.asarray(X)[..., :max_n, :]
    C = np.einsum("pia,pja->pij", X, X)
    return C.min(axis=(1, 2))


def n_clusters(X, angle=0.1, max_n=2000):
    r"""Number of connected components of the graph :math:`\langle x_i, x_j\rangle \ge \cos\alpha`."""
    X = np.asarray(X)[..., :max_n, :]
    out = np.empty(X.shape[0])
    ca = np.cos(angle)
    for p in range(X.shape[0]):
        A = csr_matrix(X[p] @ X[p].T >= ca)
        out[p] = connected_components(A, directed=False)[0]
    return out


def spectral_rank(X, frac=0.99):
    r"""Number of principal components of the centred cloud needed for ``frac`` of its variance."""
    X = np.asarray(X)
    Xc = X - X.mean(axis=-2, keepdims=True)
    out = np.empty(X.shape[0])
    for p in range(X.shape[0]):
        s2 = np.linalg.svd(Xc[p], compute_uv=False) ** 2
        tot = s2.sum()
        if tot <= 0:
            out[p] = 0
            continue
        out[p] = int(np.searchsorted(np.cumsum(s2) / tot, frac - 1e-12) + 1)
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


def clustering_series(X, angle=0.1, max_n=2000):
    """All clustering diagnostics as a dict of (P,) arrays."""
    return {
        "order_parameter": order_parameter(X),
        "min_cosine": min_cosine(X, max_n),
        "n_clusters": n_clusters(X, angle, max_n),
        "variance": variance(X),
        "spectral_rank": spectral_rank(X),
    }


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
