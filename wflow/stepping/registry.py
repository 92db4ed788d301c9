r"""The stepper registry: the protocol every token stepper follows and ``solver.method``'s table.

.. math::

    X_{k+1} = \Phi_{\text{method}}(X_k;\ D_k,\ \Delta t)
    \qquad (\text{weights frozen at } D_k \text{ within the step, [model §6]}).

It imports none of the schemes: each registers itself in its own module
(:mod:`~wflow.stepping.integrators` the Butcher tableaux, :mod:`~wflow.stepping.jko` the JKO
step, :mod:`~wflow.stepping.density` SSP-RK3), and :mod:`wflow.stepping` imports the built-in
ones, one line each. A new stepper is one file with :func:`register_stepper` and one line
there; what it declares there (a one-line doc, its stages, its SDE order) is read by the key
reference (``solver.method``'s description, :func:`methods_doc`), the memory and time
estimates (:func:`stepper_stages`) and the token-noise rule (:data:`SDE_ORDERS`). A name is
registered once (:func:`wflow.registry.register`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from wflow.registry import register

__all__ = ["StepContext", "Stepper", "StepperEntry", "STEPPERS", "SDE_ORDERS", "STEPPER_SERIES",
           "register_stepper", "register_series", "get_stepper", "stepper_stages", "methods_doc"]


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


@dataclass(frozen=True)
class StepperEntry:
    """A registered stepper: ``solver.method = name`` and what it declares.

    Attributes
    ----------
    name : the ``solver.method`` value.
    factory : ``factory(solver_config) -> Stepper`` (the entry is called like it).
    doc : one line: what the scheme is (the key reference's description of ``solver.method``).
    stages : the field evaluations of one step, :math:`s` (a tableau's stages; the memory
        estimate holds :math:`s` stage arrays, the time estimate counts :math:`s` passes).
    sde_order : the stated weak order with token noise [model §6b], or None (no noise).
    """

    name: str
    factory: Callable
    doc: str
    stages: int
    sde_order: int | None = None

    def __call__(self, solver_config: dict):
        return self.factory(solver_config)


#: solver.method -> StepperEntry (called as factory(solver_config: dict) -> Stepper)
STEPPERS: dict[str, StepperEntry] = {}


class _SdeOrders(Mapping):
    """solver.method -> the stated weak order of its stepper with token noise [model §6b],
    read from :data:`STEPPERS`; a method not in it takes no noise."""

    def __getitem__(self, method) -> int:
        entry = STEPPERS.get(method)
        if entry is None or entry.sde_order is None:
            raise KeyError(method)
        return entry.sde_order

    def __iter__(self) -> Iterator[str]:
        return (n for n, e in STEPPERS.items() if e.sde_order is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: solver.method -> the stated weak order of the stepper with token noise [model §6b]; a
#: method not listed takes no noise (``model.diffusion > 0`` is refused with it)
SDE_ORDERS: Mapping[str, int] = _SdeOrders()


def register_stepper(name: str, factory: Callable | None = None, *, doc: str, stages: int,
                     sde_order: int | None = None, replace: bool = False):
    """Register a stepper factory under ``solver.method = name`` (usable as a decorator).

    ``factory(solver_config)`` receives the ``[solver]`` table and returns a :class:`Stepper`.
    Declared with it, no defaults: ``doc``, one line on the scheme; ``stages``, the field
    evaluations of one step (an integer >= 1); ``sde_order``, the stated weak order of the
    scheme with token noise (:data:`SDE_ORDERS`), None if the stepper takes no noise. A name
    registered twice is refused (``ValueError``) unless ``replace``.
    """
    if not isinstance(doc, str) or not doc.strip() or "\n" in doc:
        raise TypeError(f"register_stepper: {name!r} needs a one-line doc (got {doc!r})")
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise TypeError(f"register_stepper: {name!r} needs stages, an integer >= 1 "
                        f"(got {stages!r})")

    def deco(f):
        entry = StepperEntry(name, f, doc.strip(), stages,
                             None if sde_order is None else int(sde_order))
        register(STEPPERS, name, entry, what="stepper", by="register_stepper", replace=replace)
        return f

    return deco if factory is None else deco(factory)


def get_stepper(method: str, solver_config: dict | None = None) -> Stepper:
    """The stepper for ``solver.method``; ``ValueError`` naming the allowed values."""
    try:
        factory = STEPPERS[method]
    except KeyError:
        raise ValueError(f"method = {method!r}: allowed values are {', '.join(STEPPERS)}") from None
    return factory(dict(solver_config or {}))


def stepper_stages(method: str) -> int:
    """The field evaluations of one step of ``solver.method = method``, as its stepper
    declares them (:attr:`StepperEntry.stages`); ``ValueError`` naming the allowed values."""
    try:
        return STEPPERS[method].stages
    except KeyError:
        raise ValueError(f"method = {method!r}: allowed values are {', '.join(STEPPERS)}") from None


def methods_doc() -> str:
    """``solver.method``'s description: each registered stepper's one-line doc, in order."""
    return "; ".join(f"{n}: {e.doc}" for n, e in STEPPERS.items())


#: the per-record series steppers report, declared beside them: name -> (description, units)
#: (the engine's series table, :mod:`wflow.engine.series`, reads them)
STEPPER_SERIES: dict[str, tuple[str, str]] = {}


def register_series(name: str, description: str, units: str = "dimensionless", *,
                    replace: bool = False) -> str:
    r"""Declare a series a stepper reports: its value :math:`s_k` (P,) at the last step before
    each record (group ``stepper`` of :mod:`wflow.engine.series`); returns ``name``. A name
    declared twice is refused (``ValueError``) unless ``replace``: declare it once, beside
    the stepper (at import, not per instance)."""
    register(STEPPER_SERIES, name, (description, units), what="series", by="register_series",
             replace=replace)
    return name
