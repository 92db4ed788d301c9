r"""The energy bookkeeping of a fixed-step run: the paper's left-point balance and the exact
ledger [model §6].

Per step, with :math:`E' = E(X_{k+1}; D_k)`:

.. math::
    \text{token part} = E' - E(X_k; D_k),\qquad
    \text{weight part} = E(X_{k+1}; D_{k+1}) - E',

    \text{weight part} = \underbrace{\langle\partial_D E', f(D_k,t_k)\Delta t\rangle}_{\text{drift}}
    + \underbrace{\langle\partial_D E', \xi_k\rangle}_{\text{martingale}} + \text{Itô (realised)},

    R = \sum_k \text{token part} - \sigma\sum_k\Delta t\,\tfrac12(\mathcal D_k + \mathcal D'_k).

Token noise [model §6b]: the token part splits further into the residual's martingale
:math:`\frac1n\sum_i\langle g_i, \sqrt{2\nu\Delta t}\,\xi_i\rangle` (``token_martingale``) and
the realised Itô term ``token_ito_realised`` = R − martingale. A density with diffusion adds
the chain rule of :math:`F = -\sigma E + \nu S` at frozen :math:`D_k` [model §5b].

The paper's balance uses left-point sums at :math:`(X_k; D_k)`:
:math:`\text{paper\_residual} = \Delta E - \sigma\sum\Delta t\,G^2 - \sum\Delta t\,\partial_tE
- \sum\Delta t\,\text{Itô}_{\text{expected}} - M`.

The weight part of step k needs :math:`E(X_{k+1}; D_{k+1})`, the energy of the next step's
first evaluation: it is held in ``State.pending`` and finished by :meth:`Ledger.close` at that
evaluation (so a checkpoint between the two carries it).
"""

from __future__ import annotations

import numpy as np

from wflow.engine import series as _series

__all__ = ["Ledger", "STEP_LEDGER"]

#: the per-step ledger pieces, in the order of the step-ledger buffer's last axis
STEP_LEDGER = _series.names(kind="per_step", group="step_ledger")


class Ledger:
    r"""The cumulative sums of [model §6] for one run.

    Parameters
    ----------
    exact : whether the exact ledger is computed (a second evaluation per step, at
        :math:`(X_{k+1}; D_k)`): ``diagnostics.ledger`` and an energy that exists.
    step_ledger : whether its per-step pieces are kept for the records.
    free_energy : whether the free-energy ledger of a density with diffusion is kept.
    record_every : steps per record interval (the per-step buffer's length).
    sigma, dt, n : the sign of the flow, the step and the number of tokens.
    """

    def __init__(self, *, exact, step_ledger, free_energy, record_every, sigma, dt, n):
        self.exact, self.step_ledger, self.free_energy = exact, step_ledger, free_energy
        self.record_every, self.sigma, self.dt, self.n = record_every, sigma, dt, n

    def open(self, st) -> None:
        """Allocate the per-step buffer of a state that has none (a fresh run)."""
        if self.step_ledger and st.step_ledger is None:
            P = st.X.shape[0]
            st.step_ledger = np.full((self.record_every, P, len(STEP_LEDGER)), np.nan)

    def close(self, st, F, k: int) -> None:
        """Finish the ledger of step k − 1 with the energy :math:`E(X_k; D_k)` of ``F``."""
        if k == 0:
            st.E0 = F.energy.copy()
        p = st.pending
        if not p:
            return
        wpart = F.energy - p["E_mid"]
        c = st.cum
        c["weight_work"] += wpart
        c["ito_realised"] += wpart - p["drift"] - p["mart"]
        c["ledger_telescoping"] = F.energy - st.E0 - c["weight_work"] - c["token_work"]
        if self.step_ledger:  # slot of step k − 1 in the record interval
            st.step_ledger[(k - 1) % self.record_every] = np.stack(
                [wpart, p["tok"], p["drift"], p["mart"], wpart - p["drift"] - p["mart"],
                 p["res"]], axis=-1)
        st.pending = {}

    def left_point(self, st, F, fk, xi, ito_rate) -> None:
        r"""The paper's left-point sums of step k: :math:`\Delta t\,\mathcal D`,
        :math:`\Delta t\,G^2`, :math:`\Delta t\langle\partial_D E, f\rangle`,
        :math:`\Delta t\,\text{Itô}_{\text{expected}}` (``ito_rate``) and the martingale
        :math:`\langle\partial_D E, \xi_k\rangle`."""
        c, dt = st.cum, self.dt
        c["int_dissipation"] += dt * F.dissipation
        c["int_G2"] += dt * F.G2
        c["int_dEdt_drift"] += dt * np.einsum("phab,phab->p", F.dE_dD, fk)
        c["int_ito_expected"] += dt * ito_rate
        c["paper_martingale"] += np.einsum("phab,phab->p", F.dE_dD, xi)

    def token_step(self, st, F, Fm, fk, xi, noise) -> None:
        r"""The exact ledger of step k from ``F`` at :math:`(X_k; D_k)` and ``Fm`` at
        :math:`(X_{k+1}; D_k)`; ``noise`` the step's token-noise increment or None. The weight
        part waits for :meth:`close`."""
        c, dt = st.cum, self.dt
        tok = Fm.energy - F.energy
        res = tok - self.sigma * dt * 0.5 * (F.dissipation + Fm.dissipation)
        c["token_work"] += tok
        c["ledger_residual"] += res
        if self.free_energy:  # the chain rule of F = -σE + νS at frozen D_k
            c["free_energy_residual"] += (
                Fm.free_energy - F.free_energy
                - dt * 0.5 * (F.free_energy_rate + Fm.free_energy_rate))
        if noise is not None:  # <g_i, P eta_i> = <g_i, eta_i>: g_i is tangent
            tmart = np.einsum("pia,pia->p", F.gradient, noise) / self.n
            c["token_martingale"] += tmart
            c["token_ito_realised"] += res - tmart
        drift = np.einsum("phab,phab->p", Fm.dE_dD, fk * dt)
        mart = np.einsum("phab,phab->p", Fm.dE_dD, xi)
        c["drift_work"] += drift
        c["martingale"] += mart
        st.pending = {"E_mid": Fm.energy.copy(), "drift": drift, "mart": mart,
                      "tok": tok, "res": res}

    def take_interval(self, st) -> dict:
        """The per-step pieces of the record interval ending here (then a fresh buffer)."""
        if not self.step_ledger:
            return {}
        out = {name: st.step_ledger[..., i].copy() for i, name in enumerate(STEP_LEDGER)}
        st.step_ledger[...] = np.nan
        return out
