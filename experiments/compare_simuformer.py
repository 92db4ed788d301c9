"""wflow's layer-norm placements against ``simuformer`` (docs/model.md §1c).

    python experiments/compare_simuformer.py PATH_TO_SIMUFORMER_CHECKOUT

``simuformer`` (github.com/nikitus20/simuformer) is not part of wflow: give the folder that
holds its ``simuxform.py``. The script builds its ``SimuXForm`` with given matrices (torch's
default dtype set to float64; its own runs use float32), puts the same tokens in, takes one
``step`` per placement and prints, per placement:

- the velocity: its attention output ``M2`` against wflow's output before projection
  u = v + ρx [model §1c] (its values V act as ``x_jᵀV``, so wflow gets V_h = Vᵀ), in float64
  and in float32;
- one step: its new tokens (and radii) against wflow's step of the same size, and the same
  with its radius rate replaced by the paper's ⟨x, u⟩ (one line of its source replaced in
  memory), for three step sizes, so that an O(η²) difference shows as a ratio of about 4
  between successive halvings.

Nothing is written; the numbers go to standard output. Needs torch (CPU) and tqdm, which
``simuxform.py`` imports.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

from wflow.geometry import sphere
from wflow.model import layernorm
from wflow.model.attention import AttentionModel
from wflow.stepping.integrators import EULER, RungeKutta
from wflow.stepping.layernorm import placement_step

#: its pre-LN and peri-LN radius rate r·Σ_a A_a, and the paper's <x, A> in its place
_RADIUS_LINES = {
    "rA_dot = torch.sum(self.r.unsqueeze(-1) * A, dim=-1)":
        "rA_dot = torch.sum(self.M * A, dim=-1)",
    "rA_norm_dot = torch.sum(self.r.unsqueeze(-1) * A_normalized, dim=-1)":
        "rA_norm_dot = torch.sum(self.M * A_normalized, dim=-1)",
}
NGPT_ALPHA = 0.2  # fixed in its nGPT update


def load(folder: Path, paper_radius: bool):
    """Its ``simuxform`` module, optionally with the paper's radius rate."""
    src = (folder / "simuxform.py").read_text()
    if paper_radius:
        for old, new in _RADIUS_LINES.items():
            if old not in src:
                sys.exit(f"simuxform.py: line not found: {old}")
            src = src.replace(old, new)
    mod = types.ModuleType("simuxform_paper" if paper_radius else "simuxform")
    mod.__file__ = str(folder / "simuxform.py")
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - a local checkout
    return mod


def simu_step(mod, torch, X, BF, V, beta, norm, eta, dtype):
    """One ``SimuXForm.step`` from tokens X (n, d), radii 1: (M', r', A) as float64 arrays."""
    torch.set_default_dtype(dtype)
    n, d = X.shape
    H = len(BF)
    args = argparse.Namespace(batch=1, ntokens=n, dmodel=d, n_heads=H, device="cpu",
                              use_softmax=True, rawstep=True, step=eta, analyze_evecs=False,
                              noanneal=1, randomKQ=0, randomV=0, sequential=False, norm=norm,
                              plotdim=False, adjacent=False, cluster_sizes=False)
    sim = mod.SimuXForm(args, beta, V=[torch.tensor(v, dtype=dtype) for v in V],
                        BF=[torch.tensor(b, dtype=dtype) for b in BF])
    sim.M = torch.tensor(X[None], dtype=dtype)
    sim.r = torch.ones(1, n, dtype=dtype)
    sim.step(0.0)
    out = (sim.M[0].double().numpy(), sim.r[0].double().numpy(), sim.M2[0].double().numpy())
    torch.set_default_dtype(torch.float64)
    return out


def wflow_step(model, X, D, norm, eta):
    """wflow's step of size eta: (x', r')."""
    Xb = X[None]
    r = np.ones((1, X.shape[0]))

    def out(Y):  # ascent: σ = +1
        return layernorm.output(model, Y, D)

    if norm == "postln":  # the unprojected post-LN step (solver.method = euler_unprojected)
        return sphere.normalize(Xb + eta * out(Xb))[0], r[0]
    place = {"preln": "pre", "periln": "peri", "ngpt": "ngpt"}[norm]
    X1, r1 = placement_step(EULER, place, Xb, r, eta, out, alpha=NGPT_ALPHA)
    return X1[0], r1[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("simuformer", type=Path, help="folder holding simuxform.py")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import torch

    mods = {False: load(a.simuformer, False), True: load(a.simuformer, True)}
    rng = np.random.default_rng(a.seed)
    X = sphere.normalize(rng.standard_normal((a.n, a.d)))
    BF = rng.standard_normal((a.heads, a.d, a.d)) @ rng.standard_normal(
        (a.heads, a.d, a.d)) / a.d  # its randomKQ = 1 family (non-symmetric)
    V = rng.standard_normal((a.heads, a.d, a.d)) / np.sqrt(a.d)  # its randomV = 1
    D = BF[None]
    model = AttentionModel(beta=a.beta, sign="ascent", backend="numpy", interaction="general",
                           values=np.swapaxes(V, -1, -2))  # its value of key j is Vᵀx_j
    u = layernorm.output(model, X[None], D)[0]
    scale = np.abs(u).max()
    print(f"n = {a.n}, d = {a.d}, H = {a.heads}, beta = {a.beta}, seed = {a.seed}; "
          f"max |u| = {scale:.3g}")
    for dtype, name in ((torch.float64, "float64"), (torch.float32, "float32")):
        _, _, A = simu_step(mods[False], torch, X, BF, V, a.beta, "postln", 0.1, dtype)
        print(f"velocity ({name}): max |M2 - u| / max |u| = {np.abs(A - u).max() / scale:.2e}")
    print("one step, float64: max |x' - x'_wflow| (and |r' - r'_wflow|); "
          "'paper radius' = its radius rate replaced by <x, A>")
    for norm in ("postln", "preln", "periln", "ngpt"):
        for paper in (False, True):
            if paper and norm in ("postln", "ngpt"):
                continue
            row = []
            for eta in (0.1, 0.05, 0.025):
                M1, r1, _ = simu_step(mods[paper], torch, X, BF, V, a.beta, norm, eta,
                                      torch.float64)
                x1, rw = wflow_step(model, X, D, norm, eta)
                row.append(f"eta {eta}: {np.abs(M1 - x1).max():.2e}"
                           + (f" ({np.abs(r1 - rw).max():.2e})" if norm in ("preln", "periln")
                              else ""))
            label = norm + (" (paper radius)" if paper else "")
            print(f"  {label:22s} " + "; ".join(row))
    # post-LN: its unprojected step against wflow's projected Euler step (order-1 twins)
    row = []
    for eta in (0.1, 0.05, 0.025):
        M1, _, _ = simu_step(mods[False], torch, X, BF, V, a.beta, "postln", eta, torch.float64)
        x1 = RungeKutta(EULER).advance(lambda Y: model.velocity(Y, D), X[None], eta)[0]
        row.append(f"eta {eta}: {np.abs(M1 - x1).max():.2e}")
    print(f"  {'postln vs projected':22s} " + "; ".join(row))


if __name__ == "__main__":
    main()
