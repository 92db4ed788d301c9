r"""
An imported model as a run
==========================

``wflow import-weights`` maps the attention of a trained checkpoint onto factored
interactions :math:`D_{\ell h} = A_{\ell h}^\top B_{\ell h}`, values
:math:`V_{\ell h} = V_{{\rm out},\ell h}V_{{\rm in},\ell h}`, per-key logit weights
:math:`w_{\ell h}` and a drift :math:`c_\ell` :ref:`[model §5c] <model-section-5c>`; with
``weights.process = "imported"`` layer :math:`\ell` acts on :math:`t\in[\ell, \ell+1)` and the
tokens flow on the LayerNorm sphere of :math:`\mathbf 1^\perp`,

.. math::

    \dot u_i = P_{u_i}\Big(P_1 c_\ell + \sum_h P_1 V_{\ell h}\sum_{j\le i}\pi^h_{ij} u_j\Big),
    \qquad \pi^h_{ij} \propto e^{u_i^\top D_{\ell h}u_j + w_{\ell h}^\top u_j} .

To run without ``torch`` this example builds the arrays of such a file in NumPy: a causal,
GPT-2-shaped model of width d = 16, H = 2 heads of width r = 8 and 4 layers, whose heads look
for similar tokens (:math:`A \approx B`, with a random non-symmetric part) and copy them
(:math:`V_{\rm out} V_{\rm in}` near a projector). The tokens cluster layer by layer; the
dotted lines are the layer switches. A real checkpoint takes the same path:
``wflow import-weights CKPT -o w.npz``, then the keys below with ``weights.imported = "w.npz"``.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import wflow
from wflow.model import checkpoint as ck

rng = np.random.default_rng(7)
d, H, r, L, n = 16, 2, 8, 4, 24
P1 = np.eye(d) - 1.0 / d  # the LayerNorm's centring


def layer():
    Q = np.linalg.qr(rng.normal(size=(d, d)) @ P1)[0][:, : H * r].T.reshape(H, r, d) @ P1
    A = 2.0 * Q + 0.3 * rng.normal(size=(H, r, d)) @ P1
    B = 2.0 * Q + 0.3 * rng.normal(size=(H, r, d)) @ P1
    key_bias = 0.1 * rng.normal(size=(H, d)) @ P1
    return ck.ImportedLayer(A, B, Q, 3.0 * Q.transpose(0, 2, 1), key_bias,
                            0.05 * rng.normal(size=d), 0.0)


model = ck.ImportedModel("gpt2", [layer() for _ in range(L)], causal=True, placement="pre",
                         heads=H, head_dim=r, source="synthetic")
with tempfile.TemporaryDirectory() as tmp:
    npz = model.save(Path(tmp) / "w.npz")
    np.savez(Path(tmp) / "tokens.npz", X=ck.tokens_from_hidden(rng.normal(size=(n, d))))
    res = wflow.simulate({
        "model": {"d": d, "n": n, "heads": H, "interaction": "general", "head_combine": "sum",
                  "sign": "ascent", "mask": "causal"},
        "init": {"tokens": "file", "tokens_file": str(Path(tmp) / "tokens.npz")},
        "weights": {"process": "imported", "imported": str(npz)},
        "solver": {"T": float(L), "dt": 0.05, "paths": 1, "record_every": 2,
                   "backend": "numpy"},
        "diagnostics": {"ledger": False},
    })

fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.plot(res.t, res.min_cosine[:, 0], label="min cosine")
ax.plot(res.t, res.order_parameter[:, 0], label="order parameter")
for ell in range(1, L):
    ax.axvline(ell, color="0.6", ls=":", lw=1)
ax.set_xlabel("t (layer)")
ax.legend(loc="lower right")
ax.set_title("Imported (synthetic) GPT-2-shaped layers: the tokens cluster")
fig.tight_layout()
print(f"min cosine {res.min_cosine[0, 0]:.3f} -> {res.min_cosine[-1, 0]:.3f}, "
      f"clusters {res.n_clusters[0, 0]:.0f} -> {res.n_clusters[-1, 0]:.0f}")
