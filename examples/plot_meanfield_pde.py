r"""
The mean-field PDE on the circle
================================

As n → ∞ the tokens become a density :math:`\rho_t` on the sphere, transported by the
attention field of the density itself :ref:`[model §5b] <model-section-5b>`:

.. math::

    \partial_t \rho + \operatorname{div}_S\big(\rho\,\sigma\,v[\rho; D(t)]\big) = 0,
    \qquad
    E[\rho] = \frac{1}{2\beta H}\sum_h \iint e^{\beta\langle x, D_h y\rangle}
              \rho(x)\,\rho(y)\,dx\,dy .

``solver.representation = "density"`` solves it on S¹ by finite volumes (N cells in angle,
MUSCL with a van Leer limiter, SSP-RK3 with CFL substeps). Here D = I, β = 1, ascent, from
the von Mises density with κ = 1: the mass gathers toward one cluster. The particle system
with n tokens drawn from the same law follows the density, with an error of order
:math:`n^{-1/2}` (``wflow study meanfield`` measures the rate). Quick size: N = 256 cells,
T = 2.
"""

import matplotlib.pyplot as plt
import numpy as np

import wflow

common = {"model": {"d": 2, "heads": 1, "beta": 1.0, "sign": "ascent"},
          "init": {"tokens": "vmf", "kappa": 1.0, "weights": "identity"},
          "weights": {"process": "frozen"},
          "diagnostics": {"ledger": False, "clustering": False}}
T = 2.0

density = wflow.simulate({**common, "density": {"cells": 256},
                          "solver": {"representation": "density", "method": "ssprk3",
                                     "dt": 0.05, "T": T, "record_every": 10}})
rho = density.rho[:, 0]                  # (records, N): cell averages of ρ
N = rho.shape[1]
theta = (np.arange(N) + 0.5) * 2 * np.pi / N

particles = wflow.simulate({**common, "model": {**common["model"], "n": 2000},
                            "solver": {"method": "rk4", "dt": 0.05, "T": T, "record_every": 10}})
angles = np.mod(np.arctan2(particles.X[..., 1], particles.X[..., 0]), 2 * np.pi)[:, 0]

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
ax = axes[0]
for r, color in zip(range(len(density.t)), plt.cm.viridis(np.linspace(0, 0.9, len(density.t)))):
    ax.plot(theta, rho[r], color=color, label=f"density, t = {density.t[r]:g}")
    ax.hist(angles[r], bins=64, range=(0, 2 * np.pi), density=True, histtype="step",
            color=color, alpha=0.6, ls="--")
ax.set_xlabel("θ")
ax.set_ylabel("ρ (lines) and n = 2000 particles (histograms)")
ax.legend(fontsize="small")

ax = axes[1]
ax.plot(density.t, density.energy[:, 0], "k", label="density, N = 256")
ax.plot(particles.t, particles.energy[:, 0], "o", label="particles, n = 2000")
ax.set_xlabel("t")
ax.set_ylabel("energy E")
ax.legend()
fig.tight_layout()
print(f"energy at T: density {density.energy[-1, 0]:.5f}, particles {particles.energy[-1, 0]:.5f}")
