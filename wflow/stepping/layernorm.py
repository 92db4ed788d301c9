r"""The post-LN block as a stepper, and the steps of the other layer-norm placements
[model §1c].

``solver.method = "euler_unprojected"`` is the post-LN layer :math:`\mathrm{LN}(x + A(x))`:

.. math::
    x' = \frac{x + \Delta t\,\sigma u(x)}{\lvert x + \Delta t\,\sigma u(x)\rvert}
       = R_x\Big(\frac{\Delta t}{1 + \Delta t\,\sigma\rho}\,\sigma v\Big),
    \qquad \rho = \langle x, u\rangle,

the update of GLPR's code and of ``simuformer``: the projected Euler step of [model §6] with
the per-token step :math:`\Delta t/(1 + \Delta t\sigma\rho)`, of order 1.

:class:`PlacedStepper` wraps a run's stepper for the placements other than post-LN: each step
is :func:`placement_step` with the stepper's tableau (Mix-LN: the wrapped stepper itself
before its switch time), the radii of the residual stream are its series ``radius``.

:func:`placement_step` advances the other placements with an explicit tableau: nGPT on the
sphere (field :math:`\alpha P_x\hat u`, :math:`\hat u = \sigma u/\lvert u\rvert`, retracted),
pre-LN and peri-LN on the residual stream :math:`z = r x \in \mathbb R^d` (field
:math:`\sigma u(z/\lvert z\rvert)`, resp. its unit vector; no retraction), then
:math:`r = \lvert z\rvert`, :math:`x = z/r`. Like every stepper it sees fields, not attention.
"""

from __future__ import annotations

import numpy as np

from wflow.errors import NumericalError
from wflow.geometry import sphere
from wflow.model.layernorm import PLACEMENTS
from wflow.params import Choice, Interval, Param, When, bad, choices_text, declare, error
from wflow.stepping.integrators import TABLEAUX, ButcherTableau, RungeKutta
from wflow.stepping.registry import StepContext, register_stepper

__all__ = ["UnprojectedEuler", "PlacedStepper", "placement_step", "check_radius"]


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


class PlacedStepper:
    r"""The stepper of a layer-norm placement other than post-LN [model §1c].

    Parameters
    ----------
    inner : the run's stepper (an explicit tableau; it takes the post-LN steps of Mix-LN).
    tableau : its Butcher tableau.
    placement : a :class:`~wflow.model.layernorm.Placement` (its ``name``, ``alpha``,
        ``switch``, ``at``, ``has_radius``).

    The radii r_i (P, n) of the residual stream (pre-, peri-, mix-LN) are the series
    ``radius``: read from ``ctx.last`` and returned with the step, so a checkpoint holds them.
    """

    sde_order = None

    def __init__(self, inner, tableau: ButcherTableau, placement):
        self.inner, self.tableau, self.placement = inner, tableau, placement
        self.name, self.order = inner.name, inner.order
        self.series = tuple(inner.series) + (("radius",) if placement.has_radius else ())

    def initial_info(self, P: int, n: int) -> dict:
        """The series before the first step: r_i = 1 (the tokens are unit vectors)."""
        return {"radius": np.ones((P, n))} if self.placement.has_radius else {}

    def step(self, ctx: StepContext):
        place = self.placement.at(ctx.t, ctx.dt)
        if place == "post":
            return self.inner.step(ctx)
        r = None if ctx.last is None else ctx.last.get("radius")
        X1, r1 = placement_step(self.tableau, place, ctx.X, r, ctx.dt, ctx.output,
                                self.placement.alpha)
        if self.placement.has_radius:
            check_radius(place, ctx.X, X1, r, r1, ctx.t, ctx.dt)
            return X1, {"radius": r1}
        return X1, {}


def check_radius(place, X0, X1, r0, r1, t, dt):
    r"""Stop where the flow of a residual-stream placement ends [model §1c]: a
    :class:`~wflow.errors.NumericalError` if a step halved a radius
    (:math:`r_{k+1} < r_k/2`) or turned a token by more than a right angle
    (:math:`\langle x_{k+1}, x_k\rangle \le 0`): the radius is then :math:`O(\Delta t)` and
    reaches 0 within a few steps, where :math:`\dot x = \sigma v/r` has no solution."""
    r0 = np.ones_like(r1) if r0 is None else np.asarray(r0)
    halved = r1 < 0.5 * r0
    turned = np.einsum("...a,...a->...", X0, X1) <= 0.0
    bad = halved | turned
    if not np.any(bad):
        return
    p, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
    k = int(round(t / dt)) + 1
    what = "fell from" if halved[p, i] else "turned (direction) at"
    raise NumericalError(
        f"model.layernorm = {place!r}: the radius r_i of token {i} (path {p}) {what} "
        f"{r0[p, i]:.3g} to {r1[p, i]:.3g} at step {k} (t = {t + dt:.6g}); the residual "
        "stream reaches the origin, where the flow ends (docs/model.md §1c): the run stops "
        "here", step=k)


# ------------------------------------------------------------------ configuration keys

#: the unprojected output u of [model §1c] is computed for the model of §2 (no key biases,
#: no drift): the weight processes whose model it does not describe
_NO_OUTPUT_PROCESSES = ("imported",)


def _layernorm_rule(cfg):
    """``model.layernorm`` other than "post" [model §1c]: particles, an explicit tableau with
    fixed steps, no token noise, no ledger; the unprojected step is the post-LN block."""
    m, s = cfg["model"], cfg["solver"]
    place, method = m["layernorm"], s["method"]
    process = cfg["weights"]["process"]
    if method == "euler_unprojected" and process in _NO_OUTPUT_PROCESSES:
        raise error(f"solver.method = 'euler_unprojected' with weights.process = {process!r}: "
                    "its attention output carries key biases and a drift (docs/model.md §5c); "
                    "use euler")
    if place == "post":
        return
    where = f"with model.layernorm = {place!r}"
    if s["representation"] != "particles":
        raise bad("solver.representation", s["representation"],
                  f"must be 'particles' {where}: a density carries no radius and no |u| per "
                  "point (docs/model.md §1c)")
    if method == "euler_unprojected":
        raise bad("solver.method", method, f"is the post-LN block: not allowed {where}; allowed "
                                           f"are {choices_text(tuple(TABLEAUX))}")
    if method not in TABLEAUX:
        raise bad("solver.method", method, f"must be an explicit tableau {where} (the placements "
                                           "are not gradient flows of E): allowed are "
                                           f"{choices_text(tuple(TABLEAUX))}")
    if s["adaptive"]:
        raise bad("solver.adaptive", True, f"must be false {where}")
    if m["diffusion"] != 0:
        raise bad("model.diffusion", m["diffusion"], f"must be 0 {where}: no SDE order is "
                                                     "stated for the placements")
    if process in _NO_OUTPUT_PROCESSES:
        raise bad("weights.process", process, f"is not allowed {where}: its attention output "
                                              "carries key biases and a drift (docs/model.md §5c)")
    if cfg["diagnostics"]["ledger"]:
        raise error(f"diagnostics.ledger = true {where}: the ledger is not derived for a "
                    "per-token speed factor (docs/model.md §1c); set it to false")


declare(
    Param("model.layernorm", "post", Choice(PLACEMENTS),
          "layer-norm placement: post (the flow on the sphere), pre (residual z = r x, "
          "ż = σu), peri (ż = σu/|u|), mix (post until model.mix_switch, then pre), ngpt "
          "(ẋ = α σ P_x u/|u|) [model §1c]", rule=_layernorm_rule),
    Param("model.ngpt_alpha", 0.2, Interval(0, 1, "right"),
          "nGPT's step size α: ẋ = α σ P_x u/|u| [model §1c]",
          applies=When("model.layernorm", "ngpt")),
    Param("model.mix_switch", 5.0, Interval(0, None, "both"),
          "Mix-LN: the time t_s of the switch from post-LN to pre-LN (on the step grid) "
          "[model §1c]", applies=When("model.layernorm", "mix")),
    after="model.head_combine")
