r"""Token noise [model §6b]: the key ``model.diffusion`` and its rule.

With :math:`\nu > 0` the tokens follow :math:`dx = \sigma v\,dt + \sqrt{2\nu}\,P_x\circ dW`
(Brownian motion on the sphere, generator :math:`\nu\Delta_S`): on particles a stepper with a
stated SDE order takes it (projected Euler–Maruyama, :data:`~wflow.stepping.registry.SDE_ORDERS`);
a density diffuses in its fluxes with any of its SSP schemes [model §5b].
"""

from __future__ import annotations

from wflow.params import Interval, Param, bad, choices_text, declare
from wflow.stepping.registry import SDE_ORDERS

__all__ = []


def _diffusion_rule(cfg):
    """``model.diffusion`` > 0: token noise on particles [model §6b] needs a stepper with a
    stated SDE order; a density diffuses with any of its SSP schemes [model §5b]."""
    nu = cfg["model"]["diffusion"]
    if nu == 0 or cfg["solver"]["representation"] == "density":
        return
    method = cfg["solver"]["method"]
    if method not in SDE_ORDERS:
        raise bad("model.diffusion", nu,
                  f"must be 0 with solver.method = {method!r}: token noise needs a scheme with "
                  f"a stated SDE order, {choices_text(tuple(SDE_ORDERS))} (projected "
                  "Euler–Maruyama)")


declare(
    Param("model.diffusion", 0.0, Interval(0, None, "both"),
          "token diffusion ν: Brownian motion on the sphere, generator ν Δ_S [model §6b]",
          rule=_diffusion_rule),
    after="model.values")
