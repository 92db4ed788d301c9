"""Convergence in h of the S¹ density solver [model §5b], and its cost per step.

    python experiments/density_convergence.py [--T 0.5] [--N 32 64 128 256 512]

A smooth case: von Mises start (κ = 2 about θ = 0), one head, D = I frozen, β = 1, SSP-RK3
at Courant number 0.2 (dt = 0.2 h, so the time error O(dt³) is below the space error),
descent and ascent, for each limiter. The error of grid N is estimated by the difference of
successive grids (the 2N solution averaged onto the N cells), in L¹ (Σ|·| h) and L∞; the
observed order is log2 of the ratio of successive differences. Then the cost of one step
(SSP-RK3: three weighted kernel passes, the reconstruction and fluxes) per N and heads.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from wflow.geometry.circle_fv import CircleGrid
from wflow.model.attention import AttentionModel
from wflow.model.density import DensityModel, von_mises_density
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext


def solve(N, limiter, T, sign, kappa=2.0, courant=0.2, method="ssprk3"):
    g = CircleGrid(N)
    dm = DensityModel(AttentionModel(beta=1.0, sign=sign), g, limiter=limiter)
    D = np.eye(2)[None, None]
    rho = g.cell_averages(lambda th: von_mises_density(th, kappa))[None]
    nsteps = int(round(T / (courant * g.h)))
    st = DensityStepper(method)
    for _ in range(nsteps):
        F = dm.evaluate(rho, D, want_ito=False)
        rho, _ = st.step(StepContext(X=rho, dt=T / nsteps, sigma=dm.sigma, k1=F.rate,
                                     max_dt=F.max_dt, velocity=lambda r: dm.rate(r, D)))
    return rho[0]


def orders(Ns, limiter, T, sign):
    sols = {N: solve(N, limiter, T, sign) for N in Ns}
    e1, ei = [], []
    for a, b in zip(Ns[:-1], Ns[1:]):
        diff = sols[b].reshape(-1, 2).mean(axis=1) - sols[a]
        e1.append(np.abs(diff).sum() * 2 * np.pi / a)
        ei.append(np.abs(diff).max())
    e1, ei = np.array(e1), np.array(ei)
    return e1, ei, np.log2(e1[:-1] / e1[1:]), np.log2(ei[:-1] / ei[1:])


def cost_per_step(N, H, repeats=3):
    """(wall, CPU) seconds of one SSP-RK3 step with the ledger pass, medians over repeats
    (the CPU time of the process is the number to read on a shared machine)."""
    rng = np.random.default_rng(0)
    g = CircleGrid(N)
    A = rng.standard_normal((1, H, 2, 2))
    D = A + np.swapaxes(A, -1, -2)
    dm = DensityModel(AttentionModel(beta=1.0), g)
    rho = g.cell_averages(lambda th: von_mises_density(th, 2.0))[None]
    st = DensityStepper("ssprk3")
    times, cpu = [], []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        c0 = time.process_time()
        F = dm.evaluate(rho, D)
        st.step(StepContext(X=rho, dt=1e-3, sigma=dm.sigma, k1=F.rate, max_dt=F.max_dt,
                            velocity=lambda r: dm.rate(r, D)))
        dm.evaluate(rho, D, want_ito=False)  # the ledger's second pass
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(times[1:])), float(np.median(cpu[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=float, default=0.5)
    ap.add_argument("--N", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    ap.add_argument("--cost-N", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--cost-H", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--cost-only", action="store_true")
    a = ap.parse_args()
    print(f"smooth case: von Mises kappa = 2, D = I, T = {a.T}, SSP-RK3, Courant 0.2")
    print("differences between grids N and 2N: " + ", ".join(f"{n}/{2 * n}" for n in a.N[:-1]))
    for sign in (() if a.cost_only else ("descent", "ascent")):
        for lim in ("none", "van_leer", "mc", "minmod"):
            e1, ei, o1, oi = orders(a.N, lim, a.T, sign)
            print(f"{sign:8s} {lim:9s} L1 diff {' '.join(f'{x:.2e}' for x in e1)}  "
                  f"orders L1 {' '.join(f'{x:.2f}' for x in o1)}  "
                  f"Linf {' '.join(f'{x:.2f}' for x in oi)}", flush=True)
    print("cost of one SSP-RK3 step with the ledger (4 weighted passes), median of 3, "
          "1 path, wall and CPU time:")
    for H in a.cost_H:
        for N in a.cost_N:
            wall, cpu = cost_per_step(N, H)
            print(f"  H = {H:3d}  N = {N:5d}: wall {1e3 * wall:9.2f} ms  CPU {1e3 * cpu:9.2f} ms",
                  flush=True)


if __name__ == "__main__":
    main()
