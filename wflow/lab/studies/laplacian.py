r"""Laplacian heads against attention heads, on sequences as a batch.

Every run is a batch of P sequences (Monte Carlo paths) of n tokens drawn around per-class
centres (``init.tokens = "classes"``), all driven by ONE weight path
(``weights.shared_path``): the same D(0) and the same OU noise. A fraction k/H of the H = 8
heads are Laplacian [model §2]: head h ∈ L contributes :math:`P_{x_i}(V_h x_i - a_h)`
instead of :math:`P_{x_i} a_h`. Since :math:`P_{x_i} x_i = 0`, a Laplacian head with
:math:`V_h = \lambda I` is exactly an attention head with :math:`V_h = -\lambda I`.

Measured per sequence: the within-sequence variance :math:`1 - |\bar x|^2`, the number of
principal components for 99% of the variance, and the cluster count; over the batch: the
ANOVA split (:func:`wflow.model.diagnostics.anova_split`) into within-sequence,
between-sequence (within class) and between-class parts. The full mode runs every point at
Δt and Δt/2 (the resolution check).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from wflow.lab.analysis import mean_ci
from wflow.lab.studies._base import Study, register_study
from wflow.lab.sweep import expand_grid
from wflow.model.diagnostics import ANOVA_PARTS, anova_split

LAPLACIAN_BASE = {
    "model": {"d": 3, "n": 32, "heads": 8, "beta": 1.0, "normalization": "head",
              "sign": "descent", "values": "tied", "laplacian_heads": 0},
    "init": {"tokens": "classes", "classes": 3, "kappa": 10.0, "class_kappa": 20.0,
             "weights": "symmetric_gaussian", "seed": 0},
    "weights": {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0,
                "scheme": "euler_maruyama", "shared_path": True},
    "solver": {"method": "euler", "dt": 0.025, "T": 8.0, "record_every": 8, "paths": 12},
    "diagnostics": {"ledger": False, "clustering": True},
    "output": {"store_tokens": True},
}

#: the full grid (the quick one is a corner of it)
FULL_GRID = {"model.d": [3, 8], "model.sign": ["descent", "ascent"],
             "model.values": ["tied", "minus_identity", "identity", "symmetric_gaussian"],
             "model.laplacian_heads": [0, 2, 4, 6, 8]}
QUICK_GRID = {"model.d": [3], "model.sign": ["descent"],
              "model.values": ["minus_identity", "identity"], "model.laplacian_heads": [0, 8]}
#: per-sequence measures at T (summary columns) and the ANOVA fractions
MEASURES = ("variance", "spectral_rank", "n_clusters")
FRACTIONS = tuple(f"{p}_frac" for p in ANOVA_PARTS)
#: the batch numbers: the ANOVA fractions, the total and the between-class variance
BATCH = FRACTIONS + ("total", "between_class")


def _batch_stats(a, i):
    """(:data:`BATCH`) at record i of an :func:`anova_split` result."""
    return np.array([a[p][i] / a["total"][i] for p in ANOVA_PARTS]
                    + [a["total"][i], a["between_class"][i]], dtype=float)


def class_labels(cfg) -> np.ndarray:
    """Class of each path of a run: ``(init.first_path + p) mod init.classes``."""
    P = int(cfg["solver"]["paths"])
    return (int(cfg["init"].get("first_path", 0)) + np.arange(P)) % int(cfg["init"]["classes"])


def anova_ci(X, labels, level=0.95, n_resamples=399, seed=0):
    r"""Percentile bootstrap interval (half-width) of the :data:`BATCH` numbers (ANOVA
    fractions part/total, total, between-class variance) at one time, resampling the
    sequences within their classes (``scipy.stats.bootstrap``, one resample of every class's
    sequences per draw). Returns (5,) half-widths."""
    from scipy import stats

    labels = np.asarray(labels)
    groups = [np.flatnonzero(labels == c) for c in np.unique(labels)]

    def stat(*idx, axis=-1):
        sel = np.concatenate([g[np.asarray(i, dtype=int)] for g, i in zip(groups, idx)])
        return _batch_stats(anova_split(X[sel][None], labels[sel]), 0)

    res = stats.bootstrap(tuple(np.arange(g.size) for g in groups), stat, vectorized=False,
                          paired=False, n_resamples=n_resamples, confidence_level=level,
                          method="percentile", rng=np.random.default_rng(seed))
    return (res.confidence_interval.high - res.confidence_interval.low) / 2


def _key(cfg):
    m = cfg["model"]
    return (int(m["d"]), m["sign"], m["values"], len(m["laplacian_heads"]))


@register_study
class Laplacian(Study):
    """Laplacian heads (k of H = 8) × values (tied, −I, +I, random symmetric) × sign × d.

    Each run: 12 sequences (3 classes) of 32 tokens, one shared OU weight path, T = 8, at
    Δt = 0.025 and 0.0125. Quick: d = 3, descent, V = ±I, k ∈ {0, 8}, T = 0.2, 6 sequences
    of 12 tokens.
    """

    name = "laplacian"
    question = ("do Laplacian heads smooth sequences (within-sequence variance, PCA rank, "
                "clusters, ANOVA of a batch) for tied, ±I and random symmetric values?")
    quick = ("d = 3, descent, V = ±I, k ∈ {0, 8} of H = 8, T = 0.2, 6 sequences of 12 tokens, "
             "both Δt: the ANOVA identity and the ±I equivalence")
    summary_columns = (("variance", "variance", "final"),
                       ("spectral_rank", "spectral_rank", "final"))
    dts = (0.025, 0.0125)

    def base(self, scale):
        base = copy.deepcopy(LAPLACIAN_BASE)
        if scale == "quick":
            base["model"]["n"] = 12
            base["solver"].update({"T": 0.2, "dt": 0.02, "record_every": 5, "paths": 6})
        return base

    def variants(self, base, scale):
        grid = dict(QUICK_GRID if scale == "quick" else FULL_GRID)
        dt = float(base["solver"]["dt"])
        grid["solver.dt"] = [dt, dt / 2]
        tasks = []
        for name, cfg in expand_grid(base, grid, name="lap"):
            s = cfg["solver"]  # keep the record times of the two step sizes equal
            if s["dt"] != dt:
                s["record_every"] = 2 * s["record_every"]
            tasks.append((name, cfg))
        return tasks

    # ------------------------------------------------------------------ reading
    def series(self, data):
        """``{(d, sign, values, k): {dt: {"t", "variance", "spectral_rank", "n_clusters",
        "anova" (dict of (records,)), "X_final", "labels"}}}`` from the result files."""
        from wflow.storage.io import read

        out = {}
        for (point, cfg), path in zip(data.tasks, data.paths):
            _, arr, _ = read(path)
            labels = class_labels(cfg)
            a = anova_split(arr["X"], labels)
            out.setdefault(_key(cfg), {})[float(cfg["solver"]["dt"])] = {
                "point": point, "t": np.asarray(arr["t"]), "labels": labels,
                "H": int(cfg["model"]["heads"]),
                "X_final": np.asarray(arr["X"][-1]), "anova": a,
                **{m: np.asarray(arr[m]) for m in MEASURES}}
        return out

    def summarize(self, data):
        """Per point at T: the mean over sequences of the measures (95% t-interval over the
        sequences) and the batch ANOVA — fractions part/total, total and between-class
        variance (95% percentile bootstrap over the sequences within classes) — at Δt/2
        (reported) with |value(Δt) − value(Δt/2)| (the check); ``unresolved`` names the
        numbers whose change exceeds their interval."""
        runs = self._runs(data)
        cols = ["d", "sign", "values", "k", "H"]
        for m in MEASURES + BATCH:
            cols += [m, f"{m}_ci", f"{m}_dt_change"]
        cols += ["total_0", "between_class_0", "resolved", "unresolved", "anova_identity_err"]
        table = {c: [] for c in cols}
        heads = ("var_within", "PCs99", "clusters", "within/tot", "btw_seq/tot", "btw_cls/tot",
                 "total", "btw_cls")
        lines = ["Laplacian heads: values at T (the Δt/2 run) ± 95% interval over the sequences; "
                 "Δ = |value(Δt) − value(Δt/2)|; 'unresolved' lists the numbers with Δ > interval",
                 f"{'d':>2} {'sign':<8}{'values':<19}{'k/H':>5}"
                 + "".join(f"{h:>19}" for h in heads) + "  unresolved"]
        for key in sorted(runs, key=lambda k: (k[0], k[1], FULL_GRID["model.values"].index(k[2])
                                               if k[2] in FULL_GRID["model.values"] else 9, k[3])):
            by_dt = runs[key]
            dts = sorted(by_dt)
            fine, coarse = by_dt[dts[0]], by_dt[dts[-1]]
            d, sign, values, k = key
            row = {"d": d, "sign": sign, "values": values, "k": k, "H": fine["H"]}
            bad = []
            for m in MEASURES:
                v = float(np.mean(fine[m][-1]))
                ci = mean_ci(fine[m][-1])
                ch = abs(v - float(np.mean(coarse[m][-1])))
                if not (ch <= ci or ch == 0):
                    bad.append(m)
                row.update({m: v, f"{m}_ci": ci, f"{m}_dt_change": ch})
            cis = anova_ci(fine["X_final"], fine["labels"])
            for j, m in enumerate(BATCH):
                v = _batch_stats(fine["anova"], -1)[j]
                ch = abs(v - _batch_stats(coarse["anova"], -1)[j])
                if not ch <= cis[j]:
                    bad.append(m)
                row.update({m: v, f"{m}_ci": float(cis[j]), f"{m}_dt_change": ch})
            a = fine["anova"]
            row["total_0"] = float(a["total"][0])
            row["between_class_0"] = float(a["between_class"][0])
            row["anova_identity_err"] = float(np.max(np.abs(
                a["total"] - sum(a[p] for p in ANOVA_PARTS)) / a["total"]))
            row["resolved"] = not bad
            row["unresolved"] = " ".join(bad)
            for c in cols:
                table[c].append(row[c])

            def pm(m, row=row):
                return f"{row[m]:.3g}±{row[m + '_ci']:.2g}"

            frac = f"{k}/{row['H']}"
            lines.append(f"{d:>2} {sign:<8}{values:<19}{frac:>5}"
                         + "".join(f"{pm(m):>19}" for m in MEASURES + BATCH)
                         + "  " + row["unresolved"])
        lines.append(f"resolved: {sum(table['resolved'])} of {len(table['resolved'])} points "
                     "(every number); largest relative ANOVA identity error "
                     f"{max(table['anova_identity_err'], default=np.nan):.1e}")
        lines.append("at t = 0 (the same for every point of a d): total "
                     + ", ".join(f"d = {d}: {t:.4g} (between classes {b:.4g})" for d, t, b in
                                 sorted(set(zip(table["d"], table["total_0"],
                                                table["between_class_0"])))))
        eq = self.equivalence(runs)
        if eq:
            lines.append("V = λI: a Laplacian head is an attention head with V → −V; max |X_T − X'_T| "
                         "between (all heads Laplacian, V = −I) and (none, V = +I): "
                         + ", ".join(f"d = {d} {s}: {e:.1e}" for (d, s), e in eq.items()))
        self._table = (data, "\n".join(lines), table)
        return self._table[1:]

    def _runs(self, data):
        """:meth:`series`, read once per ``data`` (summarize and figures share it)."""
        cached = getattr(self, "_series_cache", None)
        if cached is None or cached[0] is not data:
            self._series_cache = cached = (data, self.series(data))
        return cached[1]

    @staticmethod
    def equivalence(runs):
        """max |X_T − X'_T| between (every head Laplacian, V = −I) and (no Laplacian head,
        V = +I) per (d, sign), at the smaller Δt, where both were run."""
        out = {}
        for (d, sign, values, k), by_dt in runs.items():
            dt = min(by_dt)
            other = runs.get((d, sign, "identity", 0))
            if values == "minus_identity" and k == by_dt[dt]["H"] and other is not None:
                out[(d, sign)] = float(np.max(np.abs(by_dt[dt]["X_final"]
                                                     - other[dt]["X_final"])))
        return out

    def figures(self, data, outdir, formats):
        from wflow.lab.figures import laplacian as figs

        runs = self._runs(data)
        cached = getattr(self, "_table", None)
        table = cached[2] if cached is not None and cached[0] is data else self.summarize(data)[1]
        outdir = Path(outdir)
        return (figs.final_vs_fraction(table, outdir, formats)
                + figs.within_variance_time(runs, outdir, formats)
                + figs.anova_time(runs, outdir, formats))
