r"""
Laplacian heads
===============

An attention head moves a token toward the attention average of the values,
:math:`w_h = P_{x_i} a_h(x_i)` with :math:`a_h(x_i) = \sum_j \pi^h_{ij} V_h x_j`; a
*Laplacian* head uses the difference instead :ref:`[model §2] <model-section-2>`,

.. math::

    w_h = P_{x_i}\big(V_h x_i - a_h(x_i)\big)
        = P_{x_i}\sum_j \pi^h_{ij}\, V_h (x_i - x_j),

a graph Laplacian with the attention weights as edge weights. Under descent
(:math:`\dot x_i = -v_i`) with tied values :math:`V_h = D_h` it pulls each token toward its
attention-weighted neighbours: Laplacian heads smooth a sequence.

Here each Monte Carlo path is one sequence of n = 32 tokens (three classes of sequences,
``init.tokens = "classes"``), H = 8 heads with OU weights, of which the last k are
Laplacian heads; the within-sequence variance :math:`\frac1n\sum_i |x_i - \bar x|^2` falls
faster the more heads are Laplacian. Quick size: T = 2, 6 sequences (``wflow study
laplacian`` runs T = 8 over values, signs, d and k).
"""

import matplotlib.pyplot as plt

import wflow

base = {"model": {"d": 3, "n": 32, "heads": 8, "sign": "descent", "values": "tied"},
        "init": {"tokens": "classes", "classes": 3, "kappa": 10.0, "class_kappa": 20.0},
        "weights": {"process": "ou", "shared_path": True},
        "solver": {"T": 2.0, "dt": 0.025, "paths": 6, "record_every": 4},
        "diagnostics": {"ledger": False}}

fig, ax = plt.subplots(figsize=(5.5, 3.6))
for k in (0, 2, 4, 8):
    res = wflow.simulate({**base, "model": {**base["model"], "laplacian_heads": k}})
    var = res.variance.mean(axis=1)  # mean over the sequences
    ax.semilogy(res.t, var, label=f"k = {k} of 8 Laplacian")
    print(f"k = {k}: within-sequence variance {var[0]:.3f} -> {var[-1]:.3g}, "
          f"clusters at T {res.n_clusters[-1].mean():.1f}")
ax.set_xlabel("t")
ax.set_ylabel("within-sequence variance")
ax.legend()
ax.set_title("tied values, descent, S² (quick size)")
fig.tight_layout()
