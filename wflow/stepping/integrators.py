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
from typing import Callable, Protocol

import numpy as np

from wflow.core import sphere

__all__ = ["ButcherTableau", "RungeKutta", "EULER", "HEUN", "RK4", "TABLEAUX", "STEPPERS",
           "StepContext", "Stepper", "register_tableau", "register_stepper", "get_stepper",
           "integrate"]


@dataclass
class StepContext:
    r"""What a stepper may use to advance the tokens over one step (weights frozen at
    :math:`D_k`, [model §6]).

    Attributes
    ----------
    X : (P, n, d) tokens :math:`X_k`.
    dt : step :math:`\Delta t`.
    sigma : the sign σ = ±1 of the flow.
    velocity : callable Y (P, n, d) -> σ v(Y; D_k), the token field with frozen weights.
    k1 : σ v(X_k; D_k), already computed with the diagnostics (saves one evaluation).
    energy_grad : callable (p, Y (n, d)) -> (E, ∇E / n) of path p at frozen weights
        (energy-based steppers).
    mobility : (P, n) mobility b of the metric at X_k (energy-based steppers).
    max_dt : (P,) the largest stable step at X_k (the CFL step of a density), or None.
    """

    X: np.ndarray
    dt: float
    sigma: float
    velocity: Callable
    k1: np.ndarray | None = None
    energy_grad: Callable | None = None
    mobility: np.ndarray | None = None
    max_dt: np.ndarray | None = None


class Stepper(Protocol):
    """The one protocol of token steppers: explicit tableaux, JKO, and any later scheme.

    ``name`` is the ``solver.method`` value, ``order`` the declared order in Δt, ``series``
    the names of the per-record series the stepper reports (declared in
    :mod:`wflow.engine.series`); ``step`` returns the new tokens and a dict with those series'
    values of this step, each of shape (P,).
    """

    name: str
    order: int
    series: tuple

    def step(self, ctx: StepContext) -> tuple[np.ndarray, dict]: ...


#: solver.method -> factory(solver_config: dict) -> Stepper
STEPPERS: dict[str, Callable] = {}


def register_stepper(name: str, factory: Callable | None = None):
    """Register a stepper factory under ``solver.method = name`` (usable as a decorator).

    ``factory(solver_config)`` receives the ``[solver]`` table and returns a :class:`Stepper`.
    """
    def deco(f):
        STEPPERS[name] = f
        return f

    return deco if factory is None else deco(factory)


def get_stepper(method: str, solver_config: dict | None = None) -> Stepper:
    """The stepper for ``solver.method``; ``ValueError`` naming the allowed values."""
    if method not in STEPPERS:
        from wflow.stepping import jko  # noqa: F401  (registers "jko")
    try:
        factory = STEPPERS[method]
    except KeyError:
        raise ValueError(f"method = {method!r}: allowed values are {', '.join(STEPPERS)}") from None
    return factory(dict(solver_config or {}))


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


#: solver.method -> ButcherTableau (the explicit schemes; data, as in scipy's solve_ivp)
TABLEAUX: dict[str, ButcherTableau] = {}


def register_tableau(tab: ButcherTableau) -> ButcherTableau:
    """Declare an explicit scheme: its tableau is run by :class:`RungeKutta` under
    ``solver.method = tab.name``, and the tests check its order conditions and convergence
    at ``tab.order`` without being edited."""
    TABLEAUX[tab.name] = tab
    register_stepper(tab.name, lambda solver_config, tab=tab: RungeKutta(tab))
    return tab


EULER = register_tableau(ButcherTableau("euler", ((0.0,),), (1.0,), (0.0,), 1))
HEUN = register_tableau(ButcherTableau("heun", ((0.0, 0.0), (1.0, 0.0)), (0.5, 0.5), (0.0, 1.0), 2))
RK4 = register_tableau(ButcherTableau(
    "rk4",
    ((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
    (1 / 6, 1 / 3, 1 / 3, 1 / 6),
    (0.0, 0.5, 0.5, 1.0),
    4,
))


class RungeKutta:
    """A retracted explicit Runge–Kutta solver.

    Parameters
    ----------
    tableau : ButcherTableau
    retraction : callable ``(X, U) -> X'`` mapping a point and an ambient/tangent
        increment back to the manifold (default: :func:`wflow.core.sphere.retract`).
    """

    series = ()  # no per-step statistics

    def __init__(self, tableau: ButcherTableau, retraction=sphere.retract):
        self.tableau = tableau
        self.retraction = retraction

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def name(self) -> str:
        return self.tableau.name

    def step(self, ctx: StepContext):
        """The :class:`Stepper` protocol: one step of ``ctx.velocity`` from ``ctx.X``."""
        return self.advance(ctx.velocity, ctx.X, ctx.dt, ctx.k1), {}

    def advance(self, F, X, dt, k1=None):
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


def integrate(F, X0, dt, nsteps, solver: RungeKutta):
    """Advance ``nsteps`` steps of an autonomous field (for tests and studies); returns X."""
    X = np.array(X0, dtype=float)
    for _ in range(nsteps):
        X = solver.advance(F, X, dt)
    return X
