r"""Geometry of the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`, row-wise.

Every function acts on the last axis of arrays of shape ``(..., d)``: a token
cloud ``(n, d)``, a batch of paths ``(P, n, d)``, a snapshot series, ...

The integrators only see this module through :func:`retract` (and
:func:`exp_map`): geometry enters time stepping through that one hook.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "normalize",
    "project",
    "retract",
    "exp_map",
    "log_map",
    "geodesic_distance",
    "uniform",
    "von_mises_fisher",
    "octahedral",
]

_SMALL = 1e-8


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def normalize(X):
    r"""Radial projection :math:`x \mapsto x/|x|` (the renormalisation of the reference code).

    Parameters
    ----------
    X : array (..., d), rows nonzero.
    """
    X = np.asarray(X, dtype=float)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def project(X, V):
    r"""Tangent projection :math:`P_x v = v - \langle x, v\rangle x` (the layer norm's linearisation).

    Parameters
    ----------
    X : array (..., d), points on the sphere.
    V : array (..., d), ambient vectors.
    """
    return V - _dot(X, V)[..., None] * X


def retract(X, V):
    r"""Projective retraction :math:`R_x(v) = (x + v)/|x + v|`.

    For tangent ``v`` this agrees with :func:`exp_map` to second order; it is the
    explicit Euler update with renormalisation of the reference simulation.
    """
    return normalize(np.asarray(X) + np.asarray(V))


def exp_map(X, V):
    r"""Exponential map :math:`\exp_x(v) = \cos|v|\, x + \sin|v|\, v/|v|` for tangent ``v``.

    Uses :math:`\operatorname{sinc}` so that ``|v| -> 0`` is exact; the result is
    renormalised to stay on the sphere to round-off.
    """
    X = np.asarray(X, dtype=float)
    V = np.asarray(V, dtype=float)
    r = np.linalg.norm(V, axis=-1, keepdims=True)
    # np.sinc(z) = sin(pi z)/(pi z)
    Y = np.cos(r) * X + np.sinc(r / np.pi) * V
    return normalize(Y)


def log_map(X, Y):
    r"""Logarithm :math:`\log_x y = \theta\, P_x y / |P_x y|`, :math:`\theta = d_S(x, y)`.

    Stable near :math:`\theta = 0` (series :math:`\theta/\sin\theta \to 1`). At the cut
    locus :math:`y = -x` the direction is undefined; an arbitrary tangent direction of
    length :math:`\pi` is returned (the first coordinate axis not parallel to ``x``).
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    U = project(X, Y)
    s = np.linalg.norm(U, axis=-1)
    c = _dot(X, Y)
    theta = np.arctan2(s, c)
    with np.errstate(invalid="ignore", divide="ignore"):
        fac = np.where(s > _SMALL, theta / np.where(s > 0, s, 1.0), 1.0 + theta**2 / 6.0)
    out = fac[..., None] * U
    anti = (s <= _SMALL) & (c < 0)
    if np.any(anti):
        Xa = X[anti]
        E = np.zeros_like(Xa)
        k = np.argmin(np.abs(Xa), axis=-1)
        E[np.arange(len(k)), k] = 1.0
        T = project(Xa, E)
        out[anti] = np.pi * normalize(T)
    return out


def geodesic_distance(X, Y):
    r"""Great-circle distance :math:`d_S(x, y) = \arccos\langle x, y\rangle`, computed as
    :math:`\operatorname{atan2}(|x \times y|, \langle x, y\rangle)` (accurate near 0 and π)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    c = _dot(X, Y)
    s = np.linalg.norm(project(X, Y), axis=-1)
    return np.arctan2(s, c)


def uniform(n, d, rng: np.random.Generator):
    """``n`` points uniform on :math:`S^{d-1}` (normalised Gaussians), shape (n, d)."""
    return normalize(rng.standard_normal((n, d)))


def von_mises_fisher(n, mu, kappa, rng: np.random.Generator):
    r"""``n`` draws from the von Mises–Fisher law :math:`\propto e^{\kappa\langle \mu, x\rangle}`.

    Wood's (1994) rejection sampler for the cosine :math:`w = \langle\mu, x\rangle`,
    then a uniform tangent direction. Shape (n, d).
    """
    mu = normalize(np.asarray(mu, dtype=float))
    d = mu.shape[0]
    if kappa <= 0:
        return uniform(n, d, rng)
    b = (d - 1) / (2 * kappa + np.sqrt(4 * kappa**2 + (d - 1) ** 2))
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (d - 1) * np.log(1 - x0**2)
    w = np.empty(n)
    filled = 0
    while filled < n:
        m = 2 * (n - filled) + 8
        z = rng.beta((d - 1) / 2, (d - 1) / 2, size=m)
        u = rng.uniform(size=m)
        ww = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        ok = kappa * ww + (d - 1) * np.log(1 - x0 * ww) - c >= np.log(u)
        take = ww[ok][: n - filled]
        w[filled : filled + take.size] = take
        filled += take.size
    V = project(np.broadcast_to(mu, (n, d)), rng.standard_normal((n, d)))
    V = normalize(V)
    return normalize(w[:, None] * mu + np.sqrt(np.clip(1 - w**2, 0, None))[:, None] * V)


def octahedral(n, d, rng: np.random.Generator, noise=0.05):
    r"""Initial condition of [model §9]: each token picks one of the :math:`2d` vertices
    :math:`\pm e_a` uniformly, adds :math:`\mathcal N(0, \text{noise}^2)` per coordinate,
    and is renormalised. Shape (n, d).

    Draw order (fixed, for reproducibility): the vertex indices
    ``rng.integers(0, 2d, n)``, then the noise ``rng.standard_normal((n, d))``.
    """
    idx = rng.integers(0, 2 * d, size=n)
    X = np.zeros((n, d))
    X[np.arange(n), idx % d] = np.where(idx < d, 1.0, -1.0)
    X += noise * rng.standard_normal((n, d))
    return normalize(X)
