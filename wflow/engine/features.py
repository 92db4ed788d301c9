r"""What a run computes and records, decided once from its validated configuration.

Each flag is a predicate of the configuration alone, computed here and nowhere else; the run's
setup (:mod:`wflow.engine.setup`), its initial draws (:mod:`wflow.engine.initial`) and the
memory and disk estimate (:mod:`wflow.engine.memory`) read it from :func:`of`.

=================  ============================================================================
flag               true when
=================  ============================================================================
``density``        ``solver.representation = "density"`` [model §5b]
``token_noise``    :math:`\nu > 0` on particles: projected Euler–Maruyama, a noise stream per
                   path [model §6b]
``free_energy``    :math:`\nu > 0` on a density: :math:`F = -\sigma E + \nu S` and its ledger
                   [model §5b]
``energy``         the energy, its gradient and 𝒟 exist: symmetric :math:`D_h`, no mask
                   [model §1b, §2]
``ledger``         the exact ledger is computed (``diagnostics.ledger``, an energy, fixed steps)
``step_ledger``    its per-step pieces are recorded (uniform records, no causal mask)
``clustering``     the clustering series (``diagnostics.clustering``, particles)
``w2``             W₂ between records (``diagnostics.w2``, particles)
``adaptive``       embedded pairs under error control [model §6d]
``geometric``      geometric record times [model §6d]
``post``           the post-LN placement: the flow on the sphere [model §1c]
=================  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Features", "of"]


@dataclass(frozen=True)
class Features:
    """The flags of a run (see the module docstring)."""

    density: bool
    token_noise: bool
    free_energy: bool
    energy: bool
    ledger: bool
    step_ledger: bool
    clustering: bool
    w2: bool
    adaptive: bool
    geometric: bool
    post: bool
    spectral: bool


def of(cfg: dict) -> Features:
    """The :class:`Features` of the validated configuration ``cfg``."""
    m, s, dg = cfg["model"], cfg["solver"], cfg["diagnostics"]
    density = s.get("representation", "particles") == "density"
    noisy = float(m.get("diffusion", 0.0)) > 0
    energy = m.get("mask", "none") != "causal" and m.get("interaction", "symmetric") == "symmetric"
    adaptive = bool(s.get("adaptive", False))
    geometric = s.get("record_times", "uniform") == "geometric"
    ledger = bool(dg["ledger"]) and not adaptive
    return Features(
        density=density, token_noise=noisy and not density, free_energy=noisy and density,
        energy=energy, ledger=ledger,
        step_ledger=ledger and m.get("mask", "none") != "causal" and not geometric,
        clustering=bool(dg["clustering"]) and not density,
        w2=bool(dg["w2"]) and not density, adaptive=adaptive, geometric=geometric,
        post=m.get("layernorm", "post") == "post", spectral=_spectral(cfg))


def _spectral(cfg) -> bool:
    """Whether the field's kernel sums are spectral (``solver.summation`` as resolved by
    :func:`wflow.model.spectral.run_summation`) [model §2s]."""
    from wflow.model.spectral import run_summation

    return run_summation(cfg) == "spectral"
