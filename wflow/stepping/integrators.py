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

With token noise [model §6b] explicit Euler is projected Euler–Maruyama,

.. math::
    x' = R_x\big(\Delta t\,\sigma v + \sqrt{2\nu\Delta t}\,P_x\xi\big),

of weak order 1 for the Itô SDE :math:`dx = \sigma v\,dt + \sqrt{2\nu}P_x\,dW - \nu(d-1)x\,dt`
(Brownian motion on the sphere): the retraction supplies the drift :math:`-\nu(d-1)x`. The
other tableaux state no SDE order and take no noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wflow.geometry import sphere
from wflow.stepping.registry import STEPPERS, StepContext, Stepper, get_stepper, register_stepper  # noqa: F401

__all__ = ["ButcherTableau", "RungeKutta", "EULER", "HEUN", "RK4", "TABLEAUX", "register_tableau",
           "integrate",
           # the registry, re-exported (wflow.stepping.registry)
           "STEPPERS", "StepContext", "Stepper", "register_stepper", "get_stepper"]


@dataclass(frozen=True)
class ButcherTableau:
    r"""An explicit Butcher tableau: ``A`` strictly lower triangular (s, s), weights ``b`` (s,),
    nodes ``c`` (s,), and the classical ``order``; an embedded pair also has the error weights
    ``b_hat`` (s,) of order ``order_hat`` (the estimate :math:`h\sum_i (b_i - \hat b_i) K_i`,
    [model §6d])."""

    name: str
    A: tuple
    b: tuple
    c: tuple
    order: int
    sde_order: int | None = None  # weak order with token noise [model §6b]; None: no noise
    b_hat: tuple | None = None
    order_hat: int | None = None

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def embedded(self) -> bool:
        """Whether the tableau carries error weights (usable with ``solver.adaptive``)."""
        return self.b_hat is not None

    @property
    def fsal(self) -> bool:
        """First same as last: the last stage is evaluated at the new point (A_s = b, c_s = 1)."""
        return tuple(self.A[-1][: self.stages - 1]) == tuple(self.b[:-1]) and self.b[-1] == 0 \
            and self.c[-1] == 1


#: solver.method -> ButcherTableau (the explicit schemes; data, as in scipy's solve_ivp)
TABLEAUX: dict[str, ButcherTableau] = {}


def register_tableau(tab: ButcherTableau, doc: str, *, replace: bool = False) -> ButcherTableau:
    """Declare an explicit scheme: its tableau is run by :class:`RungeKutta` under
    ``solver.method = tab.name``, and the tests check its order conditions and convergence
    at ``tab.order`` without being edited.

    ``doc``: one line naming the scheme; the stepper's doc adds the order read from the
    tableau ("order p", an embedded pair "order p(p̂)"), and its stages are ``tab.stages``.
    A name registered twice is refused (``ValueError``) unless ``replace``."""
    orders = f"order {tab.order}" + (f"({tab.order_hat})" if tab.embedded else "")
    register_stepper(tab.name, lambda solver_config, tab=tab: RungeKutta(tab),
                     doc=f"{doc} ({orders})", stages=tab.stages,
                     sde_order=tab.sde_order, replace=replace)
    TABLEAUX[tab.name] = tab
    return tab


EULER = register_tableau(ButcherTableau("euler", ((0.0,),), (1.0,), (0.0,), 1, sde_order=1),
                         "explicit Euler renormalised onto the sphere")
HEUN = register_tableau(ButcherTableau("heun", ((0.0, 0.0), (1.0, 0.0)), (0.5, 0.5), (0.0, 1.0), 2),
                        "Heun")
RK4 = register_tableau(ButcherTableau(
    "rk4",
    ((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
    (1 / 6, 1 / 3, 1 / 3, 1 / 6),
    (0.0, 0.5, 0.5, 1.0),
    4,
), "classical Runge–Kutta")


class RungeKutta:
    """A retracted explicit Runge–Kutta solver.

    Parameters
    ----------
    tableau : ButcherTableau
    retraction : callable ``(X, U) -> X'`` mapping a point and an ambient/tangent
        increment back to the manifold (default: :func:`wflow.geometry.sphere.retract`).
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

    @property
    def sde_order(self) -> int | None:
        return self.tableau.sde_order

    def step(self, ctx: StepContext):
        """The :class:`Stepper` protocol: one step of ``ctx.velocity`` from ``ctx.X`` (with
        ``ctx.noise``, the projected Euler–Maruyama step :meth:`advance_noisy`)."""
        if ctx.noise is not None:
            return self.advance_noisy(ctx.velocity, ctx.X, ctx.dt, ctx.noise, ctx.k1), {}
        return self.advance(ctx.velocity, ctx.X, ctx.dt, ctx.k1), {}

    def advance_noisy(self, F, X, dt, noise, k1=None):
        r"""One projected Euler–Maruyama step [model §6b],

        .. math:: x' = R_x\big(\Delta t\, F(x) + P_x \eta\big),
            \qquad \eta = \sqrt{2\nu\Delta t}\,\xi \ (\texttt{noise}),

        for a tableau with a stated SDE order (explicit Euler); ``ValueError`` otherwise."""
        if self.tableau.sde_order is None:
            raise ValueError(f"method = {self.name!r} states no SDE order: it takes no token "
                             "noise (model.diffusion > 0 needs euler)")
        K = F(X) if k1 is None else k1
        return self.retraction(X, dt * K + sphere.project(X, noise))

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
