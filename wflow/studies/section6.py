r"""The paper's Section 6 [model §9]: late-window G² against the head count.

S², n = 200, β = 1, Δt = 5·10⁻³, T = 20, H ∈ {1, 10, 100}; OU weights with 10 Monte Carlo
paths and oscillating weights (shared phase) with one path. Summary: late-window G² per H with
a 95% CI over paths, the fit :math:`G^2 \approx aH^b` per family (expected OU b ≈ −1,
oscillating b ≈ 0), and clustering at T (clustering vs non-clustering on S²).

Each OU path draws its own X₀ (the octahedral tokens plus their noise) and D(0)
(``init.per_path_tokens``, ``init.per_path_weights``): the question is how G² scales with H
in law, and what differs between seeds is exactly X₀ and D(0). With one draw shared by all
paths (both `init.per_path_*` keys false) an interval over paths is conditional on that draw:
the H = 1 interval 0.369 ± 0.069 excluded 6 of 7 other seeds (their mean 0.474). The
oscillating family has one path per H (no weight noise): its intervals are batch means of
the path's time average, labelled "conditional on one path".
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from wflow.analysis.results import head_scaling_data
from wflow.studies._base import Study, register_study
from wflow.studies._tables import _run_figures
from wflow.sweeps.sweep import expand_grid

SECTION6_BASE = {
    "model": {"d": 3, "n": 200, "beta": 1.0, "normalization": "head", "sign": "descent"},
    "init": {"tokens": "octahedral", "token_noise": 0.05, "weights": "symmetric_gaussian",
             "seed": 0, "per_path_tokens": True, "per_path_weights": True},
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
        # the cheap oscillating family first: a long run stopped early keeps it
        return (expand_grid(osc, {"model.heads": list(self.heads)}, name="oscillating")
                + expand_grid(base, {"model.heads": list(self.heads)}, name="ou"))

    @staticmethod
    def families(paths):
        """``{"ou": [...], "oscillating": [...]}`` by file name."""
        fam = {"ou": [], "oscillating": []}
        for p in paths:
            fam["oscillating" if Path(p).name.startswith("oscillating") else "ou"].append(p)
        return fam

    def summarize(self, data):
        """Late-window (t ≥ T/2) mean G² per H with its 95% interval and the fit aH^b per
        family with the 95% interval of b — :func:`wflow.analysis.results.head_scaling_data`,
        the function the figure draws (the same numbers, the same labels) — and the
        clustering at T from the sweep summary."""
        lines = []
        table = {k: [] for k in ("family", "H", "G2", "low", "high", "paths", "order_parameter",
                                 "n_clusters", "fit_a", "fit_b", "fit_b_low", "fit_b_high",
                                 "interval", "fit_interval")}
        for name, srcs in self.families(data.paths).items():
            if not srcs:
                continue
            dat = head_scaling_data(srcs)
            clus = {}
            for src in srcs:
                point = Path(src).stem
                H = int(data.config(point)["model"]["heads"])
                clus[H] = (float(np.mean(data.column("order_parameter", point))),
                           float(np.mean(data.column("n_clusters", point))))
            labels = "; ".join(dict.fromkeys(iv.label for iv in dat["intervals"]))
            lines.append(f"{name}: late-window mean G² [{labels}]")
            lines.append(f"{'H':>6}{'G2 [95% CI]':>32}{'paths':>7}{'order':>8}{'clusters':>10}")
            fit = dat["fit"]
            fa = fit.extra["a"] if fit is not None else np.nan
            fb = fit.as_tuple() if fit is not None else (np.nan,) * 3
            for H, iv, P in zip(dat["H"].astype(int), dat["intervals"], dat["paths"]):
                op, nc = clus[H]
                lines.append(f"{H:>6}{iv.fmt('.4g'):>32}{int(P):>7}{op:>8.3f}{nc:>10.1f}")
                for k, v in zip(table, (name, int(H), *iv.as_tuple(), int(P), op, nc, fa, *fb,
                                        iv.label, fit.label if fit is not None else "")):
                    table[k].append(v)
            if fit is not None:
                quick = (f"; quick: a T = {data.config(Path(srcs[0]).stem)['solver']['T']:g} "
                         "transient, not the exponent" if data.scale == "quick" else "")
                lines.append(f"fit G2 = a H^b: a = {fa:.4g}, b = {fit.fmt('.3f')} "
                             f"({fit.label}{quick})")
        return "\n".join(lines), table

    def figures(self, data, outdir, formats):
        paths = list(data.paths)
        from wflow.figures import plotting

        fam = self.families(paths)
        groups = {"OU": fam["ou"], "oscillating, shared phase": fam["oscillating"]}
        out = list(plotting.plot_head_scaling({k: v for k, v in groups.items() if v}, outdir,
                                              formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))
