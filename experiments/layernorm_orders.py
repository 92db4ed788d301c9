"""The trajectory orders of the layer-norm placements (docs/model.md §1c), as a figure.

    python experiments/layernorm_orders.py [OUTDIR]

Each placement's scheme (Euler, Heun, RK4 on the residual stream or the sphere, and the
unprojected post-LN step) from the same tokens and weights (n = 6, d = 3, H = 2, ascent,
β = 1, tied values, nGPT α = 0.5) to T = 1 with Δt = 1/5 … 1/80, against RK4 at Δt = 1/640;
prints the errors and fitted slopes and writes ``placement_orders.png`` to OUTDIR (default
the current folder). tests/test_layernorm.py asserts the same slopes on Δt = 1/10 … 1/40.
"""

from __future__ import annotations

import sys

import numpy as np

from wflow.figures.layernorm import fitted_order, plot_placement_orders
from wflow.geometry import sphere
from wflow.model import layernorm
from wflow.model.attention import AttentionModel
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.layernorm import placement_step
from wflow.stepping.registry import StepContext, get_stepper

CASES = (("pre", "euler", 1), ("peri", "euler", 1), ("ngpt", "euler", 1),
         ("post", "euler_unprojected", 1), ("pre", "heun", 2), ("ngpt", "heun", 2),
         ("peri", "rk4", 4))


def flow(placement, method, dt, T=1.0, seed=2, n=6, d=3, H=2):
    """The state (directions, radii) at T, flattened."""
    rng = np.random.default_rng(seed)
    X = sphere.normalize(rng.standard_normal((1, n, d)))
    D = rng.standard_normal((1, H, d, d)) / np.sqrt(d)
    D = 0.5 * (D + np.swapaxes(D, -1, -2))
    model = AttentionModel(beta=1.0, sign="ascent", backend="numpy")

    def out(Y):
        return layernorm.output(model, Y, D)

    r = np.ones((1, n))
    for _ in range(int(round(T / dt))):
        if placement == "post":  # the post-LN flow: a stepper of solver.method
            ctx = StepContext(X=X, dt=dt, sigma=1.0, output=out,
                              velocity=lambda Y: model.velocity(Y, D))
            X, _ = get_stepper(method).step(ctx)
        else:
            X, r = placement_step(TABLEAUX[method], placement, X, r, dt, out, alpha=0.5)
    return np.concatenate([X.ravel(), r.ravel()])


def main(outdir="."):
    dts = np.array([1 / 5, 1 / 10, 1 / 20, 1 / 40, 1 / 80])
    data, refs = {}, {}
    for placement, method, order in CASES:
        if placement not in refs:
            refs[placement] = flow(placement, "rk4", 1 / 640)
        err = np.array([np.abs(flow(placement, method, h) - refs[placement]).max()
                        for h in dts])
        label = f"{'nGPT' if placement == 'ngpt' else placement + '-LN'}, {method}"
        data[label] = (dts, err, order)
        print(f"{label:28s} slope {fitted_order(dts, err):5.2f} (order {order}); errors "
              + " ".join(f"{e:.2e}" for e in err))
    for p in plot_placement_orders(data, outdir):
        print("wrote", p)


if __name__ == "__main__":
    main(*sys.argv[1:2])
