r"""Explicit Runge–Kutta time stepping on a manifold, given by one retraction hook.

Knows nothing about attention: a solver advances :math:`\dot y = F(y)` where
``F`` maps points (..., n, d) to tangent vectors. Schemes are Butcher tableaux
(data) run by one step function, as in ``scipy.integrate.solve_ivp``.

On the sphere the ambient field :math:`\tilde F(y) = F(y/|y|)` is smooth near
:math:`S^{d-1}`, tangent, and norm-preserving, so an explicit RK scheme applied
to it with stage points mapped back by the retraction

.. math::
    Y_i = R_{x}\Big(\Delta t\sum_{j<i} a_{ij} K_j\Big),\quad K_i = F(Y_i),\quad
    x' = R_x\Big(\Delta t \sum_i b_i K_i\Big),

keeps the order p of the tableau. With the projective retraction
:math:`R_x(u) = (x+u)/|x+u|` explicit Euler is exactly the reference simulation's
update ``normalize(x + σ dt v)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import sphere

__all__ = ["ButcherTableau", "RungeKutta", "EULER", "HEUN", "RK4", "get_solver", "SOLVERS"]


@dataclass(frozen=True)
class ButcherTableau:
    """An explicit Butcher tableau: ``A`` strictly lower triangular (s, s), weights ``b`` (s,),
    nodes ``c`` (s,), and the classical ``order``."""

    name: str
    A: tuple
    b: tuple
    c: tuple
    order: int

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = ButcherTableau("euler", ((0.0,),), (1.0,), (0.0,), 1)
HEUN = ButcherTableau("heun", ((0.0, 0.0), (1.0, 0.0)), (0.5, 0.5), (0.0, 1.0), 2)
RK4 = ButcherTableau(
    "rk4",
    ((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
    (1 / 6, 1 / 3, 1 / 3, 1 / 6),
    (0.0, 0.5, 0.5, 1.0),
    4,
)


class RungeKutta:
    """A retracted explicit Runge–Kutta solver.

    Parameters
    ----------
    tableau : ButcherTableau
    retraction : callable ``(X, U) -> X'`` mapping a point and an ambient/tangent
        increment back to the manifold (default: :func:`wflow.sphere.retract`).
    """

    def __init__(self, tableau: ButcherTableau, retraction=sphere.retract):
        self.tableau = tableau
        self.retraction = retraction

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def name(self) -> str:
        return self.tableau.name

    def step(self, F, X, dt, k1=None):
        """One step of size ``dt`` from X; ``k1`` = F(X) if already known (saves one evaluation)."""
        tab = self.tableau
        K = []
        for i in range(tab.stages):
            if i == 0:
                Ki = F(X) if k1 is None else k1
            else:
                U = sum(a * Kj for a, Kj in zip(tab.A[i][:i], K) if a != 0.0)
                Ki = F(self.retraction(X, dt * U))
            K.append(Ki)
        U = sum(b * Ki for b, Ki in zip(tab.b, K) if b != 0.0)
        return self.retraction(X, dt * U)

    def __repr__(self):
        return f"RungeKutta({self.tableau.name}, order={self.order})"


SOLVERS = {"euler": EULER, "heun": HEUN, "rk4": RK4}


def get_solver(method: str, retraction=sphere.retract) -> RungeKutta:
    """The solver for ``solver.method`` in {"euler", "heun", "rk4"}."""
    try:
        return RungeKutta(SOLVERS[method], retraction)
    except KeyError:
        raise ValueError(
            f"method = {method!r}: allowed values are {', '.join(SOLVERS)}"
        ) from None


def integrate(F, X0, dt, nsteps, solver: RungeKutta):
    """Advance ``nsteps`` steps of an autonomous field (for tests and studies); returns X."""
    X = np.array(X0, dtype=float)
    for _ in range(nsteps):
        X = solver.step(F, X, dt)
    return X
