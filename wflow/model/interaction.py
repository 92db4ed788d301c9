r"""General interactions and the combination of heads [model §1b]: the keys
``model.interaction`` and ``model.head_combine`` and their rules.

``symmetric``: :math:`D_h \in \mathrm{Sym}(d)`, the gradient flow of the energy;
``general``: any real :math:`D_h = Q_h^\top K_h`, no energy (no ledger). ``mean``:
:math:`\frac1H\sum_h` as in ``model.normalization``; ``sum``: :math:`\sum_h`, multi-head
attention.
"""

from __future__ import annotations

from wflow.model import processes as _processes
from wflow.model.attention import HEAD_COMBINES, INTERACTIONS, NO_ENERGY_GENERAL
from wflow.model.weights import GENERAL_INITIAL_WEIGHTS
from wflow.params import Choice, Param, bad, declare, error

__all__ = []


def _interaction_rule(cfg):
    """``model.interaction = "general"`` [model §1b]: no energy (no ledger; energy-based
    methods refuse it themselves), a process with a general form, particles; non-symmetric
    initial weights need it."""
    m = cfg["model"]
    kind = cfg["init"]["weights"]
    if m["interaction"] == "symmetric":
        if kind in GENERAL_INITIAL_WEIGHTS:
            raise bad("init.weights", kind, "is not symmetric: needs model.interaction = 'general'")
        return
    if cfg["diagnostics"]["ledger"]:
        raise error(f"diagnostics.ledger = true with model.interaction = 'general': "
                    f"{NO_ENERGY_GENERAL}")
    if cfg["solver"]["representation"] != "particles":
        raise bad("solver.representation", cfg["solver"]["representation"],
                  "must be 'particles' with model.interaction = 'general'")
    process = cfg["weights"]["process"]
    if not getattr(_processes.get_process(process), "accepts_general", False):
        raise bad("weights.process", process, "keeps D_h symmetric: with model.interaction = "
                                              f"'general' allowed are "
                                              f"{_processes.general_processes()}")


def _head_combine_rule(cfg):
    if cfg["model"]["head_combine"] == "sum" and cfg["model"]["normalization"] == "joint":
        raise error("model.head_combine = 'sum' with model.normalization = 'joint': the joint "
                    "normalisation is a weighted mean of the heads by construction")


declare(
    Param("model.interaction", "symmetric", Choice(INTERACTIONS),
          "symmetric: D_h ∈ Sym(d), the gradient flow; general: any real D_h, no energy, "
          "no ledger [model §1b]", rule=_interaction_rule),
    Param("model.head_combine", "mean", Choice(HEAD_COMBINES),
          "mean: (1/H) Σ_h as in model.normalization; sum: Σ_h, multi-head attention "
          "[model §1b]", rule=_head_combine_rule),
    after="model.diffusion")
