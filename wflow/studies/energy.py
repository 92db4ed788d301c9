"""The discrete energy identity: the exact ledger closes at the solver's order.

Deterministic oscillating weights (shared, H = 10, n = 50, T = 2), Euler / Heun / RK4 over
Δt ∈ {0.02, 0.01, 0.005, 0.0025}; the exact ledger residual and its fitted order (expected
min(p, 2)), the telescoping error, ∫G²/∫𝒟.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.studies._base import Study, register_study
from wflow.studies._tables import _run_figures
from wflow.sweeps.sweep import expand_grid

# ---------------------------------------------------------------------------------- energy
ENERGY_DTS = (0.02, 0.01, 0.005, 0.0025)


@register_study
class Energy(Study):
    """The discrete energy identity: oscillating shared weights, Euler/Heun/RK4 × four Δt.

    Quick: T = 0.4. Each run records once, at T (``record_every`` = T/Δt).
    """

    name = "energy"
    question = "does the exact energy ledger close at the solver's order (Euler, Heun, RK4 over Δt)?"
    quick = "T = 0.4 (the ledger orders still show)"
    methods = ("euler", "heun", "rk4")
    dts = ENERGY_DTS
    summary_columns = (
        ("max_telescoping", "ledger_telescoping",
         lambda t, a, T: np.nanmax(np.abs(a), axis=0)),
        ("int_G2_final", "int_G2", "final"),
        ("int_dissipation_final", "int_dissipation", "final"),
    )

    def base(self, scale):
        T = 2.0 if scale == "full" else 0.4
        return {"model": {"n": 50, "heads": 10}, "init": {"seed": 3},
                "weights": {"process": "oscillating", "phase": "shared", "noise_var": 0.0},
                "solver": {"T": T, "paths": 1},
                "diagnostics": {"clustering": False, "ledger": True},
                "output": {"store_tokens": False}}

    def variants(self, base, scale):
        T = base["solver"]["T"]
        tasks = []
        for method in self.methods:
            for dt in self.dts:
                cfg = copy.deepcopy(base)
                cfg["solver"].update(method=method, dt=dt, record_every=int(round(T / dt)))
                tasks += expand_grid(cfg, {}, name=f"energy-{method}-dt={dt:g}")
        return tasks

    def summarize(self, data):
        """|ledger residual| at T per solver and Δt, its fitted order, telescoping error, ∫G²/∫𝒟
        (from the sweep summary: one row per run)."""
        rows = {}
        for name, cfg in data.tasks:
            rows.setdefault(cfg["solver"]["method"], []).append(
                (cfg["solver"]["dt"], abs(float(data.column("ledger_residual", name)[0])),
                 float(data.column("max_telescoping", name)[0]),
                 float(data.column("int_G2_final", name)[0]
                       / data.column("int_dissipation_final", name)[0])))
        lines = [f"{'method':<8}" + "".join(f"{'dt=' + format(dt, 'g'):>12}" for dt in self.dts)
                 + f"{'order':>8}{'max telescoping':>18}{'int G2/int D':>14}"]
        table = {k: [] for k in ("method", "dt", "ledger_residual", "order", "max_telescoping",
                                 "int_G2_over_int_D")}
        for method, r in rows.items():
            r.sort(reverse=True)
            dts = np.array([x[0] for x in r])
            res = np.array([x[1] for x in r])
            order = float(np.polyfit(np.log(dts), np.log(res), 1)[0])
            lines.append(f"{method:<8}" + "".join(f"{e:>12.3e}" for e in res) + f"{order:>8.2f}"
                         f"{max(x[2] for x in r):>18.1e}{r[-1][3]:>14.3f}")
            for dt, e, tele, ratio in r:
                for k, v in zip(table, (method, dt, e, order, tele, ratio)):
                    table[k].append(v)
        return "\n".join(lines), table

    def figures(self, data, outdir, formats):
        from wflow.figures import plotting

        paths = list(data.paths)
        _, table = self.summarize(data)
        out = list(plotting.plot_orders(table, outdir, formats=formats))
        return out + _run_figures(paths, outdir, formats, ("ledger",))
