r"""
When the uniform state breaks
=============================

With one head, frozen :math:`D = V = I` and ascent, the uniform density on the circle is an
equilibrium of the mean-field PDE. Linearising around it :ref:`[model §6c] <model-section-6c>`,
the Fourier modes decouple and :math:`\bar\rho(1 + a\cos k\theta)` grows at

.. math::

    \lambda_k = k^2\Big(\frac{I_k(\beta)}{\beta\,c} - \nu\Big),\qquad
    c = I_0(\beta)\ (\texttt{head}),\ 1\ (\texttt{none}),

with :math:`I_k` the modified Bessel functions and ν the token diffusion; the uniform state is
linearly unstable for :math:`\nu < \nu_c = I_1(\beta)/(\beta c)`. Here the density solver
(N = 64 cells, ``head``, β = 2, ν = 0) starts from ``init.tokens = "uniform_mode"`` with
ε = 1e-4 for k = 1…4; the slope of :math:`\log A_k(t)` over the linear phase is the measured
rate. Right: the derived rates for several β: the winning mode grows like
:math:`\sqrt{2\beta}`. The closed forms and the amplitude fit are
:mod:`wflow.model.uniform_state`; ``wflow study uniform`` runs the whole study (ν_c, the
transition).
"""

import matplotlib.pyplot as plt
import numpy as np

import wflow
from wflow.model.uniform_state import derived_rate, fit_rate, mode_amplitude, winning_mode

beta = 2.0
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
ax = axes[0]
for k, color in zip(range(1, 5), plt.cm.viridis(np.linspace(0, 0.85, 4))):
    lam = float(derived_rate(k, beta, "head"))
    T = float(f"{min(30.0, np.log(100) / lam):.3g}")
    run = wflow.simulate({
        "model": {"d": 2, "heads": 1, "beta": beta, "sign": "ascent", "normalization": "head"},
        "init": {"tokens": "uniform_mode", "mode": k, "amplitude": 1e-4, "weights": "identity"},
        "weights": {"process": "frozen"},
        "solver": {"representation": "density", "method": "heun", "dt": T / 200, "T": T,
                   "record_every": 2},
        "density": {"cells": 64},
        "diagnostics": {"ledger": False, "clustering": False}})
    A = mode_amplitude(run.rho[:, 0], k)
    rate, se, _ = fit_rate(run.t, A)
    ax.semilogy(run.t, A, color=color,
                label=f"k = {k}: {rate:.4f} ± {se:.0e} (derived {lam:.4f})")
    ax.semilogy(run.t, 1e-4 * np.exp(lam * run.t), ":", color=color)
ax.set_xlabel("t")
ax.set_ylabel(r"mode amplitude $A_k$")
ax.set_title(f"head, β = {beta:g}: measured (—) vs derived (⋯)", fontsize=9)
ax.legend(fontsize=7)

ax = axes[1]
ks = np.arange(1, 16)
for b in (1.0, 4.0, 16.0, 64.0):
    lam = derived_rate(ks, b, "head")
    ax.plot(ks, lam / lam.max(), "o-", ms=3, label=f"β = {b:g}: k* = {winning_mode(b, 'head')}")
ax.set_xlabel("mode k")
ax.set_ylabel(r"$\lambda_k / \max_k \lambda_k$")
ax.set_title("derived rates: the winning mode grows with β", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
