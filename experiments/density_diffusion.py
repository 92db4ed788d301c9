"""Diffusion in the density solver [model §5b]: heat-mode orders in h, free-energy ledger orders.

    python experiments/density_diffusion.py

1. Pure diffusion (no field) of a Fourier mode on S¹ (cell averages, N = 16..256) and of a
   real spherical harmonic on S² (centre values, Fibonacci Voronoi N = 250..4000), ν = 0.1,
   SSP-RK3 at the explicit scheme's step: the error against e^{-ν k² t}, e^{-ν ℓ(ℓ+1) t}
   and the order fitted by least squares over every mesh (h = 2π/N, resp. √(4π/N)).
2. The free-energy ledger residual R_F at T = 0.4 for Δt = 0.02 … 0.0025 (Heun, `none`,
   frozen D = I, ascent, β = 2, ν = 0.1, a uniform_noise start), explicit and split, and the
   orders log2 of successive ratios; `joint` (mobility 1 and b̂) and `head` with two random
   heads.
"""

from __future__ import annotations

import numpy as np

from wflow.engine.run import simulate
from wflow.geometry import circle_fv as fv
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.model.density import real_harmonic
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext


def heat(grid, rho, nu, T):
    zero = np.zeros((1, grid.N, 2 if isinstance(grid, fv.CircleGrid) else 3))

    def rate(r):
        return grid.transport(r, zero, 1.0, cfl=0.4, nu=nu)[1]

    dt = float(grid.transport(rho, zero, 1.0, cfl=0.4, nu=nu)[2][0])
    n = int(np.ceil(T / dt))
    st = DensityStepper("ssprk3")
    for _ in range(n):
        rho, _ = st.step(StepContext(X=rho, dt=T / n, sigma=1.0, k1=rate(rho),
                                     max_dt=np.array([dt]), velocity=rate))
    return rho[0]


def orders_s1(nu=0.1, T=1.0, eps=0.5, k=3, Ns=(16, 32, 64, 128, 256)):
    hs, e1, ei = [], [], []
    for N in Ns:
        g = fv.CircleGrid(N)
        rho = g.cell_averages(lambda th: (1 + eps * np.cos(k * th)) / (2 * np.pi))[None]
        exact = g.cell_averages(
            lambda th: (1 + eps * np.exp(-nu * k * k * T) * np.cos(k * th)) / (2 * np.pi))
        err = (heat(g, rho, nu, T) - exact) * 2 * np.pi / eps
        hs.append(g.h)
        e1.append(np.abs(err).sum() * g.h / (2 * np.pi))
        ei.append(np.abs(err).max())
    return hs, e1, ei


def orders_s2(nu=0.1, T=0.5, eps=0.5, ell=3, m=-2, Ns=(250, 500, 1000, 2000, 4000)):
    hs, e2, ei = [], [], []
    for N in Ns:
        mesh = voronoi_mesh(N)
        Y = real_harmonic(ell, m, mesh.centres)
        out = heat(mesh, ((1 + eps * Y) / (4 * np.pi))[None], nu, T)
        err = (out * 4 * np.pi - 1 - eps * np.exp(-nu * ell * (ell + 1) * T) * Y) / eps
        hs.append(np.sqrt(4 * np.pi / N))
        e2.append(np.sqrt(mesh.areas @ err**2 / (4 * np.pi)))
        ei.append(np.abs(err).max())
    return hs, e2, ei


def cfg(d, **over):
    c = {"model": {"d": d, "heads": 1, "n": 8, "normalization": "none", "diffusion": 0.1,
                   "beta": 2.0, "sign": "ascent"},
         "init": {"tokens": "uniform_noise", "amplitude": 0.3, "weights": "identity"},
         "weights": {"process": "frozen"},
         "solver": {"representation": "density", "method": "heun", "T": 0.4, "paths": 1},
         "density": {"cells": 64 if d == 2 else 300}}
    for key, val in over.items():
        sec, k = key.split("__")
        c.setdefault(sec, {})[k] = val
    return c


def ledger(d, dts=(0.02, 0.01, 0.005, 0.0025), **over):
    out = []
    for dt in dts:
        r = simulate(cfg(d, solver__dt=dt, solver__record_every=int(round(0.4 / dt)), **over))
        out.append((abs(float(r.free_energy_residual[-1, 0])),
                    int(np.nanmax(r.cfl_substeps)), bool(np.all(np.diff(r.free_energy[:, 0]) <= 0))))
    return out


def main():
    for name, (hs, a, b) in (("S1 Fourier k=3, L1 / Linf", orders_s1()),
                             ("S2 harmonic (3,-2), L2 / Linf", orders_s2())):
        print(name)
        for h, x, y in zip(hs, a, b):
            print(f"  h = {h:.4f}: {x:.3e} {y:.3e}")
        print(f"  fitted orders: {np.polyfit(np.log(hs), np.log(a), 1)[0]:.3f}, "
              f"{np.polyfit(np.log(hs), np.log(b), 1)[0]:.3f}")
    for label, d, over in (("S1 none explicit", 2, {}),
                           ("S1 none split", 2, {"density__diffusion_scheme": "split"}),
                           ("S2 none explicit", 3, {}),
                           ("S1 joint 2 heads", 2, {"model__normalization": "joint",
                                                    "model__heads": 2, "model__beta": 1.0,
                                                    "init__weights": "symmetric_gaussian"}),
                           ("S1 joint 2 heads, mobility b_hat", 2, {
                               "model__normalization": "joint", "model__heads": 2,
                               "model__beta": 1.0, "init__weights": "symmetric_gaussian",
                               "density__diffusion_mobility": "b_hat"}),
                           ("S1 head 2 heads", 2, {"model__normalization": "head",
                                                   "model__heads": 2, "model__beta": 1.0,
                                                   "init__weights": "symmetric_gaussian"})):
        rows = ledger(d, **over)
        res = np.array([r[0] for r in rows])
        print(f"{label}: |R_F| {' '.join(f'{x:.2e}' for x in res)}; orders "
              f"{' '.join(f'{x:.2f}' for x in np.log2(res[:-1] / res[1:]))}; substeps "
              f"{[r[1] for r in rows]}; F non-increasing {[r[2] for r in rows]}")


if __name__ == "__main__":
    main()
