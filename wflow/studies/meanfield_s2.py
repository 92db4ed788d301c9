r"""Particles against the spectral density on :math:`S^2`: the ``meanfield`` study of
:mod:`wflow.studies.meanfield` at d = 3 (spherical harmonics to degree L on the
Gauss–Legendre grid [model §5b]; the smooth distance of the degrees 1..4; no W₂), and the
exact sphere W₂ of two point sets by POT."""

from __future__ import annotations

import numpy as np

from wflow.studies._base import register_study
from wflow.studies.meanfield import MeanField

__all__ = ["MeanFieldS2", "w2_sphere"]


def w2_sphere(X, Y, a=None, b=None):
    r"""The exact quadratic Wasserstein distance on the unit sphere (geodesic cost),

    .. math:: W_2(\mu, \nu)^2 = \min_{\pi\in\Pi(a, b)} \sum_{ij} \pi_{ij}
        \arccos(x_i\cdot y_j)^2,

    by ``ot.emd2`` (network simplex, exact up to round-off), uniform weights by default.
    Raises ``RuntimeError`` when the solver reports a problem (iteration limit, infeasible).
    """
    from wflow.model.diagnostics import transport_cost

    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    a = np.full(len(X), 1.0 / len(X)) if a is None else np.asarray(a, float) / np.sum(a)
    b = np.full(len(Y), 1.0 / len(Y)) if b is None else np.asarray(b, float) / np.sum(b)
    C = np.arccos(np.clip(X @ Y.T, -1.0, 1.0)) ** 2
    try:
        cost = transport_cost(a, b, C)
    except RuntimeError as e:
        raise RuntimeError(f"w2_sphere: {e}") from None
    return float(np.sqrt(max(cost, 0.0)))


@register_study
class MeanFieldS2(MeanField):
    """n particles (spectral summation) against the spectral density on S²: the distance of
    the harmonics of degree 1..4 in n, fitted rate, the density's own error (L against 2L),
    the fluctuations' growth against [model §6c].

    Full: four configurations, n ∈ {10², …, 10⁵} × 6 samples, and n = 10⁶ × 3 for two of
    them, T = 1, Δt = 0.25, L ∈ {16, 32}, the convergence table (L = 4, 8 against 32). Quick:
    the near-uniform start, n ∈ {100, 300, 1000} × 6 samples, T = 0.5, L ∈ {8, 16}.
    """

    name = "meanfield_s2"
    d = 3
    question = ("how fast do n particles converge to the mean-field PDE on S² (the harmonics "
                "of degree 1..4 against the spectral density, rate in n)?")
    quick = ("the near-uniform start, n ∈ {100, 300, 1000} × 6 samples, T = 0.5, "
             "L ∈ {8, 16} (n·D² is the CLT variance, the degree-1 fluctuation grows at §6c's "
             "rate)")
