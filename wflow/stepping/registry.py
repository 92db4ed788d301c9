r"""The stepper registry: the protocol every token stepper follows and ``solver.method``'s table.

.. math::

    X_{k+1} = \Phi_{\text{method}}(X_k;\ D_k,\ \Delta t)
    \qquad (\text{weights frozen at } D_k \text{ within the step, [model §6]}).

It imports none of the schemes: each registers itself in its own module
(:mod:`~wflow.stepping.integrators` the Butcher tableaux, :mod:`~wflow.stepping.jko` the JKO
step, :mod:`~wflow.stepping.density` SSP-RK3), and :mod:`wflow.stepping` imports the built-in
ones, one line each. A new stepper is one file with :func:`register_stepper` and one line
there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

__all__ = ["StepContext", "Stepper", "STEPPERS", "SDE_ORDERS", "STEPPER_SERIES",
           "register_stepper", "register_series", "get_stepper"]


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
    noise : (P, n, d) the ambient token-noise increment :math:`\sqrt{2\nu\Delta t}\,\xi`
        of the step (ξ standard normal, one array per path), or None without token noise
        ([model §6b]); a stepper projects it onto the tangent spaces itself.
    output : callable Y (P, n, d) -> σ u(Y; D_k), the combined attention output before the
        tangent projection (:math:`P_y u = v`, [model §1c]), or None (a density); costs one
        more pass per call (steppers of the unprojected block use it).
    t : the time :math:`t_k` of the step's start.
    last : the series the stepper reported at its previous step (its ``series``, e.g. the
        radii of the residual stream of a layer-norm placement, [model §1c]); a stepper whose
        state goes beyond the tokens keeps it there, so a checkpoint holds it.
    """

    X: np.ndarray
    dt: float
    sigma: float
    velocity: Callable
    k1: np.ndarray | None = None
    energy_grad: Callable | None = None
    mobility: np.ndarray | None = None
    max_dt: np.ndarray | None = None
    noise: np.ndarray | None = None
    output: Callable | None = None
    t: float = 0.0
    last: dict | None = None


class Stepper(Protocol):
    """The one protocol of token steppers: explicit tableaux, JKO, and any later scheme.

    ``name`` is the ``solver.method`` value, ``order`` the declared order in Δt, ``series``
    the names of the per-record series the stepper reports (declared beside it with
    :func:`register_series`), ``sde_order`` its weak order with token noise (None: it takes
    no noise, [model §6b]); ``step`` returns the new tokens and a dict with those series'
    values of this step, each of shape (P,).
    """

    name: str
    order: int
    series: tuple
    sde_order: int | None

    def step(self, ctx: StepContext) -> tuple[np.ndarray, dict]: ...


#: solver.method -> factory(solver_config: dict) -> Stepper
STEPPERS: dict[str, Callable] = {}

#: solver.method -> the stated weak order of the stepper with token noise [model §6b]; a
#: method not listed takes no noise (``model.diffusion > 0`` is refused with it)
SDE_ORDERS: dict[str, int] = {}


def register_stepper(name: str, factory: Callable | None = None, sde_order: int | None = None):
    """Register a stepper factory under ``solver.method = name`` (usable as a decorator).

    ``factory(solver_config)`` receives the ``[solver]`` table and returns a :class:`Stepper`.
    ``sde_order``: the stated weak order of the scheme with token noise (:data:`SDE_ORDERS`),
    None if the stepper takes no noise.
    """
    def deco(f):
        STEPPERS[name] = f
        if sde_order is not None:
            SDE_ORDERS[name] = int(sde_order)
        else:
            SDE_ORDERS.pop(name, None)
        return f

    return deco if factory is None else deco(factory)


def get_stepper(method: str, solver_config: dict | None = None) -> Stepper:
    """The stepper for ``solver.method``; ``ValueError`` naming the allowed values."""
    try:
        factory = STEPPERS[method]
    except KeyError:
        raise ValueError(f"method = {method!r}: allowed values are {', '.join(STEPPERS)}") from None
    return factory(dict(solver_config or {}))


#: the per-record series steppers report, declared beside them: name -> (description, units)
#: (the engine's series table, :mod:`wflow.engine.series`, reads them)
STEPPER_SERIES: dict[str, tuple[str, str]] = {}


def register_series(name: str, description: str, units: str = "dimensionless") -> str:
    r"""Declare a series a stepper reports: its value :math:`s_k` (P,) at the last step before
    each record (group ``stepper`` of :mod:`wflow.engine.series`); returns ``name``."""
    STEPPER_SERIES[name] = (description, units)
    return name
