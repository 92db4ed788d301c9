r"""
A regime map on S²
==================

Tokens follow :math:`\dot x_i = \sigma\, v_i` with the attention direction

.. math::

    v_i = \frac1H\sum_h P_{x_i}\sum_j \pi^h_{ij} D_h x_j, \qquad
    \pi^h_{ij} = \operatorname{softmax}_j\big(\beta\langle x_i, D_h x_j\rangle\big),

and σ = +1 (ascent: the energy :math:`E = \frac{1}{2\beta H n^2}\sum_h\sum_{ij}
e^{\beta\langle x_i, D_h x_j\rangle}` increases) or σ = −1 (descent). Which long-time
behaviour the flow shows depends on the inverse temperature β, the weights and the sign:
under ascent with D = I the tokens collapse to one cluster (fast for small β, through
metastable multi-cluster states for large β); under descent they spread out (mixing).

This example maps the number of clusters at T (tokens closer than 0.1 rad are one cluster)
over β × weights × sign, at a quick size: n = 32 uniform tokens, H = 4, T = 8, Δt = 0.01,
4 paths. The full map (seven weight families, Δt per cell, survival times) is
``wflow study regimes``.
"""

import matplotlib.pyplot as plt
import numpy as np

import wflow

betas = [0.25, 1.0, 4.0]
weights = {
    "frozen D = I": {"init": {"weights": "identity"}, "weights": {"process": "frozen"}},
    "OU": {"init": {"weights": "symmetric_gaussian"}, "weights": {"process": "ou"}},
}
signs = ["ascent", "descent"]

rows = [(w, s) for w in weights for s in signs]
clusters = np.zeros((len(rows), len(betas)))
for r, (w, sign) in enumerate(rows):
    for c, beta in enumerate(betas):
        cfg = {"model": {"n": 32, "d": 3, "heads": 4, "beta": beta, "sign": sign},
               "init": {"tokens": "uniform", "per_path_tokens": True, **weights[w]["init"]},
               "weights": weights[w]["weights"],
               "solver": {"T": 8.0, "dt": 0.01, "paths": 4, "record_every": 100},
               "diagnostics": {"ledger": False},
               "output": {"store_tokens": False}}
        res = wflow.simulate(cfg)
        clusters[r, c] = res.n_clusters[-1].mean()
        print(f"{w:<13} {sign:<8} beta = {beta:<5} clusters at T: {res.n_clusters[-1]}")

fig, ax = plt.subplots(figsize=(5.5, 3.6))
im = ax.imshow(clusters, cmap="viridis_r", vmin=1, vmax=32, aspect="auto")
for (r, c), v in np.ndenumerate(clusters):
    ax.text(c, r, f"{v:.1f}", ha="center", va="center", color="w" if v > 12 else "k")
ax.set_xticks(range(len(betas)), [f"β = {b:g}" for b in betas])
ax.set_yticks(range(len(rows)), [f"{w}, {s}" for w, s in rows])
fig.colorbar(im, ax=ax, label="clusters at T (mean over paths)")
ax.set_title("n = 32 on S², H = 4, T = 8 (quick size)")
fig.tight_layout()
