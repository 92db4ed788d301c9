r"""Time stepping of the density representation [model §5b, §6]: SSP Runge–Kutta, CFL-checked.

A density has no retraction: the stage points are plain sums,
:math:`\rho^{(i)} = \rho + \Delta t\sum_{j<i} a_{ij} K_j`, so a Butcher tableau with
non-negative coefficients is a convex combination of forward Euler steps (Shu–Osher) and
keeps :math:`\rho \ge 0` under the Courant condition of :mod:`wflow.geometry.circle_fv`. The
strong-stability-preserving schemes offered are

* ``euler`` (order 1), ``heun`` (SSP-RK2, the same tableau as the particle solver's Heun),
* ``ssprk3`` (Shu–Osher's SSP-RK3: :math:`c = (0, 1, \tfrac12)`, :math:`a_{21} = 1`,
  :math:`a_{31} = a_{32} = \tfrac14`, :math:`b = (\tfrac16, \tfrac16, \tfrac23)`).

*CFL check.* The step Δt of the run is split into :math:`s = \lceil \Delta t / \Delta t_{\rm CFL}\rceil`
equal substeps, :math:`\Delta t_{\rm CFL} = \mathrm{cfl}\,h/\max|a|` at :math:`\rho_k` (all
paths share s), weights frozen at :math:`D_k` throughout (the stepping contract). The speed
can grow within the step (a concentrating density): a stage or a result with a negative cell
average makes the step start again from :math:`\rho_k` with twice as many substeps (at most
:data:`MAX_RETRIES` times; then the :class:`~wflow.errors.NumericalError` stands). The number
of substeps and the smallest cell average after the step are reported as the stepper series
``cfl_substeps`` and ``rho_min``.

*Split diffusion* [model §5b]. Given ``diffuse(rho, tau)`` (the diffusion alone over τ), each
substep of length :math:`\tau` is Strang's :math:`\mathcal D(\tau/2)\,\mathcal T(\tau)\,
\mathcal D(\tau/2)`, the tableau stepping the transport alone (``ctx.velocity``); the first
stage is then not at :math:`\rho_k`, so ``ctx.k1`` is not used. Second order in time (the
splitting), positive and conservative when each part is.
"""

from __future__ import annotations

import math

import numpy as np

from wflow.errors import NumericalError
from wflow.stepping.integrators import HEUN, TABLEAUX, ButcherTableau, register_tableau
from wflow.stepping.registry import StepContext, register_series

__all__ = ["SSPRK3", "SSP_METHODS", "DensityStepper", "additive", "MAX_RETRIES"]

#: how many times a step that went negative is restarted with twice as many substeps
MAX_RETRIES = 4

SSPRK3 = register_tableau(ButcherTableau(
    "ssprk3",
    ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.25, 0.25, 0.0)),
    (1 / 6, 1 / 6, 2 / 3),
    (0.0, 1.0, 0.5),
    3,
), "Shu–Osher SSP-RK3")
#: the strong-stability-preserving tableaux allowed for a density (non-negative coefficients)
SSP_METHODS = ("euler", HEUN.name, SSPRK3.name)


def additive(rho, U):
    """The identity 'retraction' of a vector space: ρ + U."""
    return rho + U


class DensityStepper:
    """The :class:`~wflow.stepping.registry.Stepper` of a density.

    ``ctx.X`` is ρ (P, N), ``ctx.velocity`` the rate ρ ↦ ρ̇ at frozen weights, ``ctx.k1`` the
    rate at ρ_k and ``ctx.max_dt`` (P,) the CFL step at ρ_k. With ``diffuse`` (the split
    diffusion, :meth:`wflow.model.density.DensityModel.diffuse`) ``ctx.velocity`` is the
    transport's rate alone and every substep is a Strang step.
    """

    sde_order = None  # no token noise: a density's diffusion is in its fluxes [model §5b]
    series = (register_series("cfl_substeps", "density: CFL substeps of the last step", "count"),
              register_series("rho_min", "density: smallest cell average after the last step",
                              "1/radian"))

    def __init__(self, method: str, diffuse=None):
        if method not in SSP_METHODS:
            raise ValueError(f"method = {method!r}: a density needs a strong-stability-"
                             f"preserving scheme, allowed values are {', '.join(SSP_METHODS)}")
        self.tableau = TABLEAUX[method]
        self.diffuse = diffuse

    @property
    def name(self) -> str:
        return self.tableau.name

    @property
    def order(self) -> int:
        return self.tableau.order

    def substeps(self, dt, max_dt) -> int:
        """:math:`s = \\lceil \\Delta t / \\min_p \\Delta t_{\\rm CFL}\\rceil` (at least 1)."""
        m = float(np.min(max_dt)) if max_dt is not None else math.inf
        if not math.isfinite(m):
            return 1
        return max(1, math.ceil(dt / m * (1 - 1e-12)))

    def step(self, ctx: StepContext):
        s = self.substeps(ctx.dt, ctx.max_dt)
        for attempt in range(MAX_RETRIES + 1):
            try:
                rho = self._substeps(ctx, s)
                if np.all(rho >= 0):
                    break
                raise NumericalError(f"density: negative cell average {rho.min():.3g} "
                                     f"after a step of {s} substeps")
            except NumericalError:
                if attempt == MAX_RETRIES:
                    raise
                s *= 2
        P = rho.shape[0]
        return rho, {"cfl_substeps": np.full(P, float(s)), "rho_min": rho.min(axis=-1)}

    def _substeps(self, ctx: StepContext, s: int):
        """s equal substeps of the tableau from ctx.X (the first stage reuses ctx.k1)."""
        tab = self.tableau
        h = ctx.dt / s
        rho = ctx.X
        split = self.diffuse is not None
        for i in range(s):
            if split:
                rho = self.diffuse(rho, 0.5 * h)
            K = []
            for st in range(tab.stages):
                if st == 0:
                    reuse = i == 0 and ctx.k1 is not None and not split
                    Ki = ctx.k1 if reuse else ctx.velocity(rho)
                else:
                    U = sum(a * Kj for a, Kj in zip(tab.A[st][:st], K) if a != 0.0)
                    Ki = ctx.velocity(rho + h * U)
                K.append(Ki)
            rho = rho + h * sum(b * Ki for b, Ki in zip(tab.b, K) if b != 0.0)
            if split:
                rho = self.diffuse(rho, 0.5 * h)
        return rho
