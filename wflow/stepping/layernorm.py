r"""The post-LN block as a stepper, and the steps of the other layer-norm placements
[model §1c].

``solver.method = "euler_unprojected"`` is the post-LN layer :math:`\mathrm{LN}(x + A(x))`:

.. math::
    x' = \frac{x + \Delta t\,\sigma u(x)}{\lvert x + \Delta t\,\sigma u(x)\rvert}
       = R_x\Big(\frac{\Delta t}{1 + \Delta t\,\sigma\rho}\,\sigma v\Big),
    \qquad \rho = \langle x, u\rangle,

the update of GLPR's code and of ``simuformer``: the projected Euler step of [model §6] with
the per-token step :math:`\Delta t/(1 + \Delta t\sigma\rho)`, of order 1.

:func:`placement_step` advances the other placements with an explicit tableau: nGPT on the
sphere (field :math:`\alpha P_x\hat u`, :math:`\hat u = \sigma u/\lvert u\rvert`, retracted),
pre-LN and peri-LN on the residual stream :math:`z = r x \in \mathbb R^d` (field
:math:`\sigma u(z/\lvert z\rvert)`, resp. its unit vector; no retraction), then
:math:`r = \lvert z\rvert`, :math:`x = z/r`. Like every stepper it sees fields, not attention.
"""

from __future__ import annotations

import numpy as np

from wflow.geometry import sphere
from wflow.stepping.integrators import ButcherTableau, RungeKutta
from wflow.stepping.registry import StepContext, register_stepper

__all__ = ["UnprojectedEuler", "placement_step"]


class UnprojectedEuler:
    r"""The unprojected post-LN step :math:`x' = (x + \Delta t\,\sigma u)/\lvert x +
    \Delta t\,\sigma u\rvert` [model §1c]: order 1, no token noise, no per-step series."""

    name = "euler_unprojected"
    order = 1
    series = ()
    sde_order = None

    def step(self, ctx: StepContext):
        if ctx.output is None:
            raise ValueError("method = 'euler_unprojected' needs the attention output before "
                             "the projection (particles only)")
        return sphere.normalize(ctx.X + ctx.dt * ctx.output(ctx.X)), {}


register_stepper("euler_unprojected", lambda solver_config: UnprojectedEuler(),
                 doc="post-LN block LN(x + Δt σu) (order 1, [model §1c])", stages=1)


def _add(Z, U):
    """The identity 'retraction' of R^d: the residual stream is not constrained."""
    return Z + U


def placement_step(tableau: ButcherTableau, placement: str, X, r, dt, output, alpha=1.0):
    r"""One step of the layer-norm placement ``placement`` ("ngpt", "pre", "peri") with the
    explicit tableau ``tableau`` [model §1c].

    Parameters
    ----------
    tableau : the Butcher tableau (weights frozen within the step).
    placement : "ngpt" (sphere field :math:`\alpha P_x u/\lvert u\rvert`), "pre"
        (:math:`\dot z = u(z/\lvert z\rvert)`) or "peri" (:math:`\dot z = u/\lvert u\rvert`).
    X : (P, n, d) unit tokens x.
    r : (P, n) radii of the residual stream (ignored by nGPT).
    dt : step Δt.
    output : callable Y (P, n, d) unit -> σ u(Y) (P, n, d), the signed output before the
        projection.
    alpha : nGPT's α.

    Returns
    -------
    (X', r'): unit tokens (P, n, d) and radii (P, n) (r unchanged for nGPT).
    """
    if placement == "ngpt":
        def F(Y):
            U = output(Y)
            return alpha * sphere.project(Y, U) / np.linalg.norm(U, axis=-1, keepdims=True)

        return RungeKutta(tableau).advance(F, X, dt), r
    if placement == "pre":
        def G(Z):
            return output(sphere.normalize(Z))
    elif placement == "peri":
        def G(Z):
            U = output(sphere.normalize(Z))
            return U / np.linalg.norm(U, axis=-1, keepdims=True)
    else:
        raise ValueError(f"placement = {placement!r}: allowed values are 'ngpt', 'pre', 'peri'")
    Z1 = RungeKutta(tableau, retraction=_add).advance(G, np.asarray(r)[..., None] * X, dt)
    r1 = np.linalg.norm(Z1, axis=-1)
    return Z1 / r1[..., None], r1
