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


def clustering_series(X, angle=0.1, max_n=2000):
    """All clustering diagnostics as a dict of (P,) arrays."""
    return {
        "order_parameter": order_parameter(X),
        "min_cosine": min_cosine(X, max_n),
        "n_clusters": n_clusters(X, angle, max_n),
        "variance": variance(X),
        "spectral_rank": spectral_rank(X),
    }


def w2_geodesic(X, Y, return_plan=False):
    r"""Wasserstein-2 distance between the empirical measures of X (n, d) and Y (m, d) on the
    sphere with the geodesic cost :math:`c(x, y) = \arccos(\langle x, y\rangle)^2` (POT, exact
    network simplex):

    .. math:: W_2(\mu, \nu)^2 = \min_{\gamma \in \Pi(\mu,\nu)} \sum_{ij} \gamma_{ij}\, d_S(x_i, y_j)^2 .
    """
    import ot

    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    C = np.arccos(np.clip(X @ Y.T, -1.0, 1.0)) ** 2
    a = np.full(len(X), 1.0 / len(X))
    b = np.full(len(Y), 1.0 / len(Y))
    plan = ot.emd(a, b, C)
    w2 = float(np.sqrt(max(np.sum(plan * C), 0.0)))
    return (w2, plan) if return_plan else w2
