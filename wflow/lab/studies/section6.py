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


def batch_means_ci(series, blocks=5, level=0.95):
    r"""Half-width of the batch-means interval of the time average of one path's series:
    :math:`t_{(1+\ell)/2,\,B-1}\, s_B/\sqrt{B}`, :math:`s_B` the standard deviation of the
    means of B consecutive equal blocks (NaN with fewer than 2 values per block)."""
    from scipy import stats

    x = np.asarray(series, dtype=float).ravel()
    if x.size < 2 * blocks:
        return float("nan")
    m = np.array([b.mean() for b in np.array_split(x, blocks)])
    return float(stats.t.ppf(0.5 + level / 2, blocks - 1) * m.std(ddof=1) / np.sqrt(blocks))


def power_law_interval(H, means, ses, level=0.95):
    r"""The least-squares fit :math:`\log G^2 = \log a + b \log H` and the interval of b
    propagated from the standard errors of the means (delta method):

    .. math::

        \hat b = \sum_i w_i \log m_i, \quad w_i = \frac{x_i - \bar x}{S_{xx}}, \quad
        \operatorname{Var}\hat b \approx \sum_i w_i^2 \Big(\frac{s_i}{m_i}\Big)^2,

    :math:`x_i = \log H_i`. The half-width is :math:`z_{(1+\ell)/2}` times that standard
    deviation: the Monte Carlo uncertainty of b (not the misfit of the power law, which the
    residual standard error of :func:`~wflow.lab.analysis.fit_power_law` measures).

    Returns
    -------
    (a, b, b_stderr_residual, b_halfwidth)
    """
    from scipy import stats

    H, m, se = (np.asarray(v, dtype=float).ravel() for v in (H, means, ses))
    a, b, se_res = fit_power_law(H, m)
    x = np.log(H)
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    half = float(stats.norm.ppf(0.5 + level / 2) * np.sqrt(np.sum((w * se / m) ** 2)))
    return a, b, se_res, half


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
        """Late-window (t ≥ T/2) mean G² per H with its 95% interval — Student-t over the
        paths, or with one path the batch-means interval of its time average (5 blocks,
        read from the file) — the fit aH^b per family with the 95% interval of b
        propagated from those (:func:`power_law_interval`) and the residual standard error
        of the slope, and clustering at T; read from the sweep summary."""
        from scipy import stats

        from wflow.storage.io import read

        lines = []
        table = {k: [] for k in ("family", "H", "G2", "ci", "paths", "order_parameter",
                                 "n_clusters", "fit_a", "fit_b", "fit_se", "fit_b_ci")}
        for name, srcs in self.families(data.paths).items():
            if not srcs:
                continue
            per_H = {}
            for src in srcs:
                point = Path(src).stem
                H = int(data.config(point)["model"]["heads"])
                per_H[H] = (data.column("G2", point), data.column("order_parameter", point),
                            data.column("n_clusters", point), src)
            Hs = sorted(per_H)
            means = [float(np.mean(per_H[H][0])) for H in Hs]
            cis, ses = [], []
            for H in Hs:
                g = per_H[H][0]
                if g.size >= 2:
                    ci = mean_ci(g)
                    crit = stats.t.ppf(0.975, g.size - 1)
                else:  # one path: the batch-means interval of its late-window time average
                    _, arr, _ = read(per_H[H][3])
                    t = np.asarray(arr["t"])
                    ci = batch_means_ci(np.asarray(arr["G2"])[t >= t[-1] / 2, 0])
                    crit = stats.t.ppf(0.975, 4)
                cis.append(ci)
                ses.append(ci / crit)
            lines.append(f"{name}: late-window mean G² (95% interval: t over paths; one path: "
                         "batch means of its time average, 5 blocks)")
            lines.append(f"{'H':>6}{'G2':>12}{'CI':>12}{'paths':>7}{'order':>8}{'clusters':>10}")
            fit = (np.nan, np.nan, np.nan, np.nan)
            if len(Hs) >= 2:
                fit = power_law_interval(Hs, means, ses)
            for H, m, ci in zip(Hs, means, cis):
                g, op, nc, _ = per_H[H]
                lines.append(f"{H:>6}{m:>12.4g}{ci:>12.2g}{g.size:>7}{np.mean(op):>8.3f}"
                             f"{np.mean(nc):>10.1f}")
                for k, v in zip(table, (name, H, m, ci, int(g.size), float(np.mean(op)),
                                        float(np.mean(nc)), *fit)):
                    table[k].append(v)
            if len(Hs) >= 2:
                a, b, se, half = fit
                lines.append(f"fit G2 = a H^b: a = {a:.4g}, b = {b:.3f} ± {half:.2g} (95%, "
                             f"propagated from the intervals of the means); residual standard "
                             f"error {se:.2g} of the least-squares slope over {len(Hs)} H values")
        return "\n".join(lines), table

    def figures(self, data, outdir, formats):
        paths = list(data.paths)
        from wflow.lab import plotting

        fam = self.families(paths)
        groups = {"OU": fam["ou"], "oscillating, shared phase": fam["oscillating"]}
        out = list(plotting.plot_head_scaling({k: v for k, v in groups.items() if v}, outdir,
                                              formats=formats))
        return out + _run_figures(paths, outdir, formats, ("snapshots", "G2", "clustering"))
