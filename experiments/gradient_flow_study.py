"""Measure the gradient-flow instruments [model §4, §6, §7] and print tables.

    python experiments/gradient_flow_study.py            # ~ a few minutes on 2 cores

1. Ledger residual orders, deterministic oscillating weights (shared, H = 10, n = 50, T = 2).
2. OU, H = 10 ([model §9] setting shortened to T = 2, 2 paths): exact ledger vs the paper's residual,
   and ∫G² / ∫𝒟.
3. One Brownian path refined: RMS over paths of Σ realised Itô − Σ Δt Itô_expected vs Δt.
4. JKO vs explicit: fitted order for joint / none / head H = 1, and the gap for head H = 3.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import wflow
from wflow.engine.run import Simulation
from wflow.geometry import sphere
from wflow.model.processes import DrivenOU, brownian_increments

#: the OU parameters of the refinement studies: the configuration records them and
#: :func:`driven_ou` builds the process from them, so the run's Itô term and its stored
#: configuration describe the process that moves the weights
DRIVEN_OU = {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
             "scheme": "euler_maruyama"}


def driven_ou(dW, dt_fine):
    """The Euler–Maruyama OU of :data:`DRIVEN_OU` driven by the fine Brownian increments ``dW``."""
    return DrivenOU(dW, dt_fine, rate=DRIVEN_OU["rate"], mean=DRIVEN_OU["mean"],
                    noise_var=DRIVEN_OU["noise_var"])


def slope(x, y):
    return float(np.polyfit(np.log(x), np.log(np.abs(y)), 1)[0])


def ledger_orders():
    print("\n1. ledger residual |R(T)|, oscillating shared, H=10, n=50, T=2")
    dts = [0.02, 0.01, 0.005, 0.0025]
    print(f"{'method':<8}" + "".join(f"{'dt=' + str(dt):>14}" for dt in dts) + f"{'order':>8}")
    for method in ("euler", "heun", "rk4"):
        errs = []
        for dt in dts:
            cfg = {"model": {"n": 50, "heads": 10}, "init": {"seed": 3},
                   "weights": {"process": "oscillating", "phase": "shared", "noise_var": 0.0},
                   "solver": {"method": method, "dt": dt, "T": 2.0,
                              "record_every": int(round(2 / dt)), "paths": 1},
                   "diagnostics": {"clustering": False}}
            errs.append(abs(wflow.simulate(cfg).ledger_residual[-1, 0]))
        print(f"{method:<8}" + "".join(f"{e:>14.3e}" for e in errs) + f"{slope(dts, errs):>8.2f}")


def ou_balance():
    print("\n2. OU, H=10, n=200, 2 paths, T=2 (docs/model.md §9 shortened), one Brownian path per MC path"
          " refined across dt: mean over paths at T")
    print(f"{'dt':>8}{'|ledger R|':>14}{'|paper res|':>14}{'int G2':>10}{'int D':>10}{'G2/D':>8}")
    dW = brownian_increments(1600, (2, 10, 3, 3), 2.0 / 1600, np.random.default_rng(0))
    for dt in (0.02, 0.01, 0.005, 0.0025):
        sim = Simulation({"model": {"n": 200, "heads": 10}, "init": {"seed": 0},
                          "weights": DRIVEN_OU,
                          "solver": {"dt": dt, "T": 2.0, "record_every": int(round(2 / dt)),
                                     "paths": 2},
                          "diagnostics": {"clustering": False}},
                         process=driven_ou(dW, 2.0 / 1600))
        r = sim.run()
        g, dd = r.int_G2[-1].mean(), r.int_dissipation[-1].mean()
        print(f"{dt:>8}{np.abs(r.ledger_residual[-1]).mean():>14.3e}"
              f"{np.abs(r.paper_residual[-1]).mean():>14.3e}{g:>10.4f}{dd:>10.4f}{g / dd:>8.3f}")


def ito_refinement():
    print("\n3. one Brownian path refined (P=12 paths, n=16, H=2, T=0.5): "
          "RMS(Σ Itô realised − Σ Δt Itô expected)")
    T, P, H = 0.5, 12, 2
    dW = brownian_increments(1024, (P, H, 3, 3), T / 1024, np.random.default_rng(42))
    dts = [T / 32, T / 64, T / 128, T / 256, T / 512]
    diffs = []
    for dt in dts:
        sim = Simulation({"model": {"n": 16, "heads": H}, "init": {"seed": 5},
                          "weights": DRIVEN_OU,
                          "solver": {"dt": dt, "T": T, "record_every": int(round(T / dt)),
                                     "paths": P},
                          "diagnostics": {"clustering": False}},
                         process=driven_ou(dW, T / 1024))
        r = sim.run()
        diffs.append(np.sqrt(np.mean((r.ito_realised[-1] - r.int_ito_expected[-1]) ** 2)))
    print("dt    " + "  ".join(f"{d:.5f}" for d in dts))
    print("RMS   " + "  ".join(f"{d:.2e}" for d in diffs) + f"   slope {slope(dts, diffs):.2f}")


def jko_orders():
    print("\n4. JKO vs explicit (RK4, tau/8): max geodesic error at T, frozen weights, n=10")
    for norm, H, T in (("joint", 3, 0.32), ("none", 3, 0.08), ("head", 1, 0.32), ("head", 3, 0.32)):
        taus = [T / 4, T / 8, T / 16, T / 32]

        def cfg(method, tau, H=H, norm=norm, T=T):
            return {"model": {"n": 10, "heads": H, "normalization": norm},
                    "init": {"seed": 2, "tokens": "uniform"}, "weights": {"process": "frozen"},
                    "solver": {"method": method, "dt": tau, "T": T, "record_every": 1, "paths": 1,
                               **({"jko_tol": 1e-12, "jko_maxiter": 500} if method == "jko"
                                  else {})},
                    "diagnostics": {"clustering": False}}

        ref = wflow.simulate(cfg("rk4", taus[-1] / 8)).X[-1, 0]
        errs = [np.max(sphere.geodesic_distance(wflow.simulate(cfg("jko", tau)).X[-1, 0], ref))
                for tau in taus]
        print(f"{norm:>6} H={H}: " + "  ".join(f"{e:.3e}" for e in errs)
              + f"   order {slope(taus, errs):.2f}")


if __name__ == "__main__":
    t0 = time.time()
    parts = sys.argv[1:] or ["ledger", "ou", "ito", "jko"]
    table = {"ledger": ledger_orders, "ou": ou_balance, "ito": ito_refinement, "jko": jko_orders}
    for p in parts:
        table[p]()
    print(f"\n(total {time.time() - t0:.0f} s)")
