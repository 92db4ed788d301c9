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
from wflow.geometry.circle_fv import LIMITERS
from wflow.model.density import DIFFUSION_MOBILITIES, DIFFUSION_SCHEMES
from wflow.params import (
    Boolean,  # noqa: F401
    Choice,
    Integer,
    Interval,
    Param,
    When,
    bad,
    choices_text,
    declare,
    section_doc,
)
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
    transport's rate alone and every substep is a Strang step. With ``positive = False``
    (the spectral representation, whose positivity is monitored by the model [model §5b])
    a negative value does not restart the step.
    """

    sde_order = None  # no token noise: a density's diffusion is in its fluxes [model §5b]
    series = (register_series("cfl_substeps", "density: CFL substeps of the last step", "count"),
              register_series("rho_min", "density: smallest cell average after the last step",
                              "1/radian"))

    def __init__(self, method: str, diffuse=None, positive=True):
        if method not in SSP_METHODS:
            raise ValueError(f"method = {method!r}: a density needs a strong-stability-"
                             f"preserving scheme, allowed values are {', '.join(SSP_METHODS)}")
        self.tableau = TABLEAUX[method]
        self.diffuse = diffuse
        self.positive = positive  # False: no retry on a negative value (the spectral density)

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
                if not self.positive or np.all(rho >= 0):
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


# ------------------------------------------------------------------ configuration keys

REPRESENTATIONS = ("particles", "density")
#: initial laws a density can start from (cell averages of a closed form)
DENSITY_INITS = ("uniform", "vmf", "uniform_mode", "uniform_noise")
#: the perturbed uniform starts, density only [model §5b]
PERTURBED_INITS = ("uniform_mode", "uniform_noise")


def _representation_rule(cfg):
    """The density representation [model §5b]: S¹ or S², no causal mask, an SSP scheme,
    an initial law with a closed form."""
    if cfg["solver"]["representation"] != "density":
        return
    where = "with solver.representation = 'density'"
    if cfg["model"]["d"] not in (2, 3):
        raise bad("model.d", cfg["model"]["d"],
                  f"must be 2 (the circle S^1) or 3 (the sphere S^2) {where}")
    if cfg["model"]["mask"] != "none":
        raise bad("model.mask", cfg["model"]["mask"], f"must be 'none' {where}")
    if cfg["solver"]["method"] not in SSP_METHODS:
        raise bad("solver.method", cfg["solver"]["method"],
                  f"must be one of {choices_text(SSP_METHODS)} {where} "
                  "(strong-stability-preserving: keeps rho >= 0)")
    if cfg["init"]["tokens"] not in DENSITY_INITS:
        raise bad("init.tokens", cfg["init"]["tokens"],
                  f"must be one of {choices_text(DENSITY_INITS)} {where}")


def _perturbed_rule(cfg):
    """The perturbed uniform starts: density only; ``init.mode_m`` an order of the degree
    ``init.mode`` on S², 0 on S¹ [model §5b]."""
    ini = cfg["init"]
    if ini["tokens"] not in PERTURBED_INITS:
        return
    if cfg["solver"]["representation"] != "density":
        raise bad("init.tokens", ini["tokens"],
                  "needs solver.representation = 'density' (a perturbed uniform density); "
                  "particles start from 'uniform' (iid uniform tokens) or another initial "
                  "law of init.tokens")
    if ini["tokens"] == "uniform_mode":
        ell, m = ini["mode"], ini["mode_m"]
        if cfg["model"]["d"] == 2 and m != 0:
            raise bad("init.mode_m", m, "must be 0 on S^1 (model.d = 2: the mode is cos k theta)")
        if abs(m) > ell:
            raise bad("init.mode_m", m, f"must be in -{ell}..{ell} (|m| <= init.mode = {ell})")


declare(
    Param("solver.representation", "particles", Choice(REPRESENTATIONS),
          "particles: n tokens; density: cell averages of ρ (finite volumes on S^1 or S^2)",
          rule=_representation_rule),
    after="solver.method")
declare(
    Param("init.mode", 2, Integer(lo=1),
          "uniform_mode: the Fourier mode k (S^1: cos k theta) or the degree l (S^2)",
          applies=When("init.tokens", "uniform_mode")),
    Param("init.mode_m", 0, Integer(),
          "uniform_mode on S^2: the order m of the real spherical harmonic, |m| <= init.mode",
          applies=When("init.tokens", "uniform_mode"), rule=_perturbed_rule),
    Param("init.amplitude", 0.01, Interval(0, None, "both"),
          "ε: uniform_mode rho = rho_bar (1 + ε phi), phi = cos k theta or the harmonic of mean "
          "square 1; uniform_noise: pointwise standard deviation of the relative noise",
          applies=When("init.tokens", ("uniform_mode", "uniform_noise"))),
    Param("init.noise_modes", 8, Integer(lo=1),
          "uniform_noise: the random series has the Fourier modes 1..K (S^1) or the degrees "
          "1..L (S^2), seeded from stream (7,)",
          applies=When("init.tokens", "uniform_noise")),
    after="init.tokens")
section_doc("density", "the density representation on S^1 and S^2 (solver.representation = "
                       "'density') [model §5b]")
#: the finite-volume keys apply to finite volumes only (density.representation, declared with
#: the spectral representation in wflow.model.density_spectral) [model §5b]
_FV = (When("solver.representation", "density"), When("density.representation", "fv"))
declare(
    Param("density.cells", 256, Integer(lo=4),
          "cells N: the uniform grid in angle on S^1; Voronoi cells of N Fibonacci points on S^2",
          applies=_FV),
    Param("density.limiter", "van_leer", Choice(LIMITERS),
          "S^1: slope limiter of the MUSCL reconstruction (none: unlimited, not positive); "
          "S^2 is first-order upwind",
          applies=_FV),
    Param("density.lloyd", 0, Integer(lo=0),
          "S^2: Lloyd iterations moving the generators toward a centroidal Voronoi mesh",
          applies=_FV),
    Param("density.cfl", 0.4, Interval(0, 1, "right"),
          "Courant number of the substeps (<= 0.5 keeps rho >= 0)",
          applies=When("solver.representation", "density")),
    Param("density.diffusion_scheme", "explicit", Choice(DIFFUSION_SCHEMES),
          "explicit: the diffusion in every stage, substeps from the Courant condition of "
          "transport plus diffusion (Δt ≲ h²/(4ν)); split: Strang, each transport substep "
          "between two sub-cycled half-steps of the diffusion [model §5b]",
          applies=When("solver.representation", "density")),
    Param("density.diffusion_mobility", "one", Choice(DIFFUSION_MOBILITIES),
          "one: ν Δ_S ρ (the free energy's gradient flow for model.normalization = 'none'); "
          "b_hat: ν div(b̂ ∇ρ), b̂ = 1/Z̄ of the field (the gradient flow for 'joint'); "
          "explicit diffusion_scheme only [model §5b]",
          applies=When("solver.representation", "density")),
)

# the spectral representation's keys (density.representation, density.degree, ...) [model §5b]
from wflow.model import density_spectral  # noqa: E402, F401
