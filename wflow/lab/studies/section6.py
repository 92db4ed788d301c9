"""The paper's Section 6 [model §9]: late-window G² against the head count."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from wflow.lab.analysis import fit_power_law, mean_ci
from wflow.lab.studies._base import Study, _run_figures, register_study
from wflow.lab.sweep import expand_grid

SECTION6_BASE = {
    "model": {"d": 3, "n": 200, "beta": 1.0, "normalization": "head", "sign": "descent"},
    "init": {"tokens": "octahedral", "token_noise": 0.05, "weights": "symmetric_gaussian",
             "seed": 0},
    "weights": {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
                "scheme": "euler_maruyama"},
    "solver": {"method": "euler", "dt": 5e-3, "T": 20.0, "record_every": 5, "paths": 10},
    "diagnostics": {"ledger": False, "clustering": True},
    "output": {"store_tokens": True},
}


def _scaled(base, scale):
    cfg = copy.deepcopy(base)
    if scale == "quick":
        cfg["solver"]["T"] = 0.5
        cfg["solver"]["paths"] = min(cfg["solver"]["paths"], 2)
    return cfg


# ---------------------------------------------------------------------------------- section 6
@register_study
class Section6(Study):
    """The paper's Section 6 [model §9]: OU × H (10 paths), oscillating shared × H (1 path).

    Quick: T = 0.5, 2 OU paths. The oscillating family copies the configured OU base
    (overrides included) and replaces its weights section and path count; a given
    ``weights.target`` (``"paper"``: the paper's forcing for d ≥ 4) goes to it alone.
    """

    name = "section6"
    question = "how does the late-window G² scale with the head count H (OU vs oscillating weights)?"
    quick = "T = 0.5, 2 OU paths (the pipeline, not the exponents)"
    heads = (1, 10, 100)

    def base(self, scale):
        return _scaled(SECTION6_BASE, scale)

    def variants(self, base, scale):
        base = copy.deepcopy(base)
        # weights.target (the oscillating forcing for d >= 4, e.g. --set weights.target=paper)
        # does not apply to the OU family: it goes to the oscillating one
        target = base.get("weights", {}).pop("target", "wflow")
        osc = copy.deepcopy(base)
        osc["weights"] = {"process": "oscillating", "phase": "shared", "noise_var": 0.0,
                          "scheme": "euler", "target": target}
        osc["solver"]["paths"] = 1
        return (expand_grid(base, {"model.heads": list(self.heads)}, name="ou")
                + expand_grid(osc, {"model.heads": list(self.heads)}, name="oscillating"))

    @staticmethod
    def families(paths):
        """``{"ou": [...], "oscillating": [...]}`` by file name."""
        fam = {"ou": [], "oscillating": []}
        for p in paths:
            fam["oscillating" if Path(p).name.startswith("oscillating") else "ou"].append(p)
        return fam

    def summarize(self, data):
        """Late-window (t ≥ T/2) mean G² per H with its 95% t-interval over paths, the fit
        aH^b per family, and clustering at T; read from the sweep summary."""
        lines = []
        table = {k: [] for k in ("family", "H", "G2", "ci", "paths", "order_parameter",
                                 "n_clusters", "fit_a", "fit_b", "fit_se")}
        for name, srcs in self.families(data.paths).items():
            if not srcs:
                continue
            per_H = {}
            for src in srcs:
                point = Path(src).stem
                H = int(data.config(point)["model"]["heads"])
                per_H[H] = (data.column("G2", point), data.column("order_parameter", point),
                            data.column("n_clusters", point))
            Hs = sorted(per_H)
            means = [float(np.mean(per_H[H][0])) for H in Hs]
            lines.append(f"{name}: late-window mean G² (95% t-interval over paths; "
                         "none with one path)")
            lines.append(f"{'H':>6}{'G2':>12}{'CI':>12}{'paths':>7}{'order':>8}{'clusters':>10}")
            fit = (np.nan, np.nan, np.nan)
            if len(Hs) >= 2:
                fit = fit_power_law(Hs, means)
            for H, m in zip(Hs, means):
                g, op, nc = per_H[H]
                ci = mean_ci(g)
                lines.append(f"{H:>6}{m:>12.4g}{ci:>12.2g}{g.size:>7}{np.mean(op):>8.3f}"
                             f"{np.mean(nc):>10.1f}")
                for k, v in zip(table, (name, H, m, ci, int(g.size), float(np.mean(op)),
                                        float(np.mean(nc)), *fit)):
                    table[k].append(v)
            if len(Hs) >= 2:
                a, b, se = fit
                lines.append(f"fit G2 = a H^b: a = {a:.4g}, b = {b:.3f} (standard error "
                             f"{se:.2g} of the least-squares slope over {len(Hs)} H values)")
        return "\n".join(lines), table

    def figures(self, data, outdir, formats):
        paths = list(data.paths)
        from wflow.lab import plotting

        fam = self.families(paths)
        groups = {"OU": fam["ou"], "oscillating, shared phase": fam["oscillating"]}
        out = list(plotting.plot_head_scaling({k: v for k, v in groups.items() if v}, outdir,
                                              formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))
