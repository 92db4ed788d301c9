r"""
A GPT-2 checkpoint imported and run
===================================

``wflow.model.checkpoint.load`` (the command ``wflow import-weights CKPT -o w.npz``) maps the
attention of a safetensors checkpoint onto interactions :math:`D_{\ell h}`, values
:math:`V_{\ell h}`, per-key logit weights :math:`w_{\ell h}` and a drift :math:`c_\ell`
:ref:`[model §5c] <model-section-5c>`; with ``weights.process = "imported"`` layer
:math:`\ell` acts on :math:`t\in[\ell, \ell+1)` and the tokens flow on the LayerNorm sphere
of :math:`\mathbf 1^\perp`,

.. math::

    \dot u_i = P_{u_i}\Big(P_1 c_\ell + \sum_h P_1 V_{\ell h}\sum_{j\le i}\pi^h_{ij} u_j\Big),
    \qquad \pi^h_{ij} \propto e^{u_i^\top D_{\ell h}u_j + w_{\ell h}^\top u_j} .

Nothing is downloaded and no ``torch`` is needed: the example writes two small GPT-2-shaped
checkpoints (width d = 16, H = 2 heads of width r = 8, 6 layers, tensor names of GPT-2) with
``safetensors.numpy`` and runs each through the two commands of the guide's *From a
checkpoint*: ``wflow import-weights CKPT -o W.npz --tokens 24`` (which writes ``W.toml``
beside the arrays and prints the command that runs it) and the printed ``wflow run W.toml``.
These checkpoints hold no token embeddings, so the configuration starts uniform on the sphere
of :math:`\mathbf 1^\perp` (``init.imported_tokens = "uniform"``, the same seed for both); a
checkpoint saved by ``transformers`` starts from its own input embeddings of token ids
(``--token-ids``).

- **GPT-2's initialisation**: every projection i.i.d. :math:`N(0, 0.02^2)`, biases 0,
  LayerNorm gains 1. Then :math:`D_h = (d/\sqrt r)\,P_1 W_{Q,h}^\top W_{K,h} P_1` is tiny
  (its norm :math:`\beta_h`, printed below, is a few hundredths) and so are the values:
  the tokens barely move, they do not cluster. Its heads are half antisymmetric: the
  antisymmetric fraction :math:`\lVert D - D^\top\rVert_F/(2\lVert D\rVert_F)` of a product of
  independent Gaussian matrices is close to :math:`1/\sqrt2` (the ``asymmetry`` study
  measures what that fraction does to clustering).
- **Similarity-seeking heads**: :math:`W_{Q,h} = W_{K,h} = c\,Q_h` with orthonormal rows
  :math:`Q_h`, so :math:`D_h` is a positive multiple of a projector (symmetric, antisymmetric
  fraction 0, :math:`\beta_h \approx 4`), and values that copy,
  :math:`V_h = 4\,Q_h^\top Q_h`. The tokens cluster
  layer by layer; under GPT-2's causal mask they gather towards the first token.

The dotted lines are the layer switches.
"""

import contextlib
import io
import json
import shlex
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from safetensors.numpy import save_file

from wflow.cli import main
from wflow.storage import io as results_io

rng = np.random.default_rng(7)
d, H, r, L, n = 16, 2, 8, 6, 24
P1 = np.eye(d) - 1.0 / d  # the LayerNorm's centring


def gpt2_init():
    """GPT-2's initialisation of one block's attention: N(0, 0.02²) weights, zero biases."""
    return {"c_attn.weight": 0.02 * rng.normal(size=(d, 3 * d)),
            "c_proj.weight": 0.02 * rng.normal(size=(d, d))}


def similarity_seeking(c=0.85, c_v=1.0):
    """Queries = keys = c Q_h (orthonormal rows Q_h), values c_v Q_h and output c_v Q_hᵀ."""
    Q = np.linalg.qr(rng.normal(size=(d, d)) @ P1)[0][:, : H * r].T  # (H r, d) rows
    # GPT-2's Conv1D stores Wᵀ: c_attn.weight is (d, 3d) with columns [Q | K | V]
    return {"c_attn.weight": np.concatenate([c * Q.T, c * Q.T, c_v * Q.T], axis=1),
            "c_proj.weight": c_v * Q}


def write_checkpoint(folder, make):
    tensors = {}
    for ell in range(L):
        block = make()
        tensors[f"h.{ell}.attn.c_attn.weight"] = block["c_attn.weight"]
        tensors[f"h.{ell}.attn.c_attn.bias"] = np.zeros(3 * d)
        tensors[f"h.{ell}.attn.c_proj.weight"] = block["c_proj.weight"]
        tensors[f"h.{ell}.attn.c_proj.bias"] = np.zeros(d)
        tensors[f"h.{ell}.ln_1.weight"] = np.ones(d)
        tensors[f"h.{ell}.ln_1.bias"] = np.zeros(d)
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_head": H, "n_layer": L, "n_embd": d,
         "layer_norm_epsilon": 1e-5}))
    return folder


def wflow_cli(*argv) -> str:
    """``wflow ARGV...`` in this process; its printed output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    assert code == 0, f"wflow {' '.join(argv)} exited with {code}"
    return out.getvalue()


results = {}
with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    for name, make in (("GPT-2 init (std 0.02)", gpt2_init),
                       ("similarity-seeking heads", similarity_seeking)):
        folder = write_checkpoint(tmp / make.__name__, make)
        npz = tmp / f"{make.__name__}.npz"
        printed = wflow_cli("import-weights", str(folder), "-o", str(npz), "--tokens", str(n))
        print(printed)  # β_h and the antisymmetric fraction per head, then the command
        lines = printed.splitlines()
        command = shlex.split(lines[lines.index("run it with:") + 1])  # wflow run W.toml
        wflow_cli(*command[1:], "-q")
        _, arrays, _ = results_io.read(npz.with_suffix(".h5"))
        results[name] = {k: np.asarray(arrays[k]) for k in ("t", "n_clusters", "min_cosine")}

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.4))
for name, res in results.items():
    ax1.plot(res["t"], res["n_clusters"][:, 0], label=name)
    ax2.plot(res["t"], res["min_cosine"][:, 0], label=name)
for ax in (ax1, ax2):
    for ell in range(1, L):
        ax.axvline(ell, color="0.6", ls=":", lw=1)
    ax.set_xlabel("t (layer)")
ax1.set_ylabel("clusters (angle 0.1)")
ax2.set_ylabel("smallest cosine between tokens")
ax1.legend(fontsize=8)
ax1.set_title("cluster count", fontsize=10)
ax2.set_title("spread of the tokens", fontsize=10)
fig.tight_layout()
for name, res in results.items():
    print(f"{name}: clusters {res['n_clusters'][0, 0]:.0f} -> {res['n_clusters'][-1, 0]:.0f}, "
          f"min cosine {res['min_cosine'][0, 0]:.3f} -> {res['min_cosine'][-1, 0]:.3f}")
