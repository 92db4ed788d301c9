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
Δt and Δt/2 (the resolution check); :meth:`Laplacian.refine` reruns chosen points (default:
the unresolved ones) at Δt/4, Δt/8, … and the summary then reports each point from its two
finest steps.
"""

from __future__ import annotations

import copy
import csv
import re
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow.analysis.results import mean_ci
from wflow.model.diagnostics import ANOVA_PARTS, anova_split
from wflow.studies._base import Study, StudyOptions, register_study, run_study
from wflow.sweeps.sweep import expand_grid

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


def anova_ci(X, labels, level=0.95):
    r"""Half-widths of the 95% jackknife Student-t intervals of the :data:`BATCH` numbers
    (ANOVA fractions part/total, total, between-class variance) at one time, over the N
    sequences:

    .. math::
        t_{(1+\ell)/2,\,N-1}\Big(\frac{N-1}{N}\sum_{i=1}^{N}
        \big(\hat\theta_{(-i)} - \hat\theta_{(\cdot)}\big)^2\Big)^{1/2},

    :math:`\hat\theta_{(-i)}` the numbers without sequence i (its class keeps at least two
    sequences). Not the percentile bootstrap: with 12 sequences (4 per class) its
    resamples only recombine those few and its intervals come out too narrow
    (:mod:`wflow.analysis.intervals`: no bootstrap below 20 units). NaN when a class has fewer
    than 3 sequences. Returns (5,) half-widths."""
    from scipy import stats

    from wflow.analysis.intervals import MIN_PATHS

    labels = np.asarray(labels)
    N = labels.size
    if min(np.sum(labels == c) for c in np.unique(labels)) < MIN_PATHS:
        return np.full(len(BATCH), np.nan)
    th = np.array([_batch_stats(anova_split(X[np.arange(N) != i][None],
                                            labels[np.arange(N) != i]), 0) for i in range(N)])
    se = np.sqrt((N - 1) / N * np.sum((th - th.mean(axis=0)) ** 2, axis=0))
    return stats.t.ppf(0.5 + level / 2, N - 1) * se


def study_brownian_path(cfg, levels=0):
    r"""The Brownian increments that drive the one weight path of the run ``cfg``
    (``weights.shared_path``), refined ``levels`` times by the Brownian bridge.

    Step k of the run draws :math:`\xi_k \sim N(0, I)` of shape (H, d, d) from stream (5,)
    of ``init.seed``; its increment is :math:`\Delta W_k = \sqrt{\Delta t}\,\xi_k`. One
    refinement splits every increment S of a step 2δ into two of step δ with that sum,

    .. math:: a = S/2 + \sqrt{\delta/2}\, z, \qquad b = S - a, \qquad z \sim N(0, I),

    (the law of (a, b) given a + b = S; z from stream (6, level) of ``init.seed``), so the
    path is the run's own at its step and every coarser step sums the finer increments.

    Returns
    -------
    (dW, dt_fine) : ((K, H, d, d) array, float), K = T / dt_fine.
    """
    s, m = cfg["solver"], cfg["model"]
    seed = int(cfg["init"]["seed"])
    dt = float(s["dt"])
    K = int(round(float(s["T"]) / dt))
    H, d = int(m["heads"]), int(m["d"])
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5,)))
    dW = np.sqrt(dt) * np.stack([rng.standard_normal((H, d, d)) for _ in range(K)])
    for level in range(int(levels)):
        dt /= 2
        z = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(6, level)))
        a = dW / 2 + np.sqrt(dt / 2) * z.standard_normal(dW.shape)
        fine = np.empty((2 * dW.shape[0], *dW.shape[1:]))
        fine[0::2], fine[1::2] = a, dW - a
        dW = fine
    return dW, dt


def same_path_runs(point, cfg, halvings=(-1, 0, 1)):
    r"""Runs of the task ``(point, cfg)`` at :math:`\Delta t\,2^{-j}`, j in ``halvings``, all
    driven by ONE Brownian path (:func:`study_brownian_path`, refined to the finest step;
    :class:`~wflow.model.processes.DrivenOU`): the j = 0 run is the study's own run of
    ``cfg``, and the differences between the runs are discretisation errors alone (the
    study's runs at two steps draw two different weight paths).

    Returns ``{dt: entry}`` (:meth:`Laplacian.entry`)."""
    from wflow.engine.run import Simulation
    from wflow.model.processes import DrivenOU

    w = cfg["weights"]
    if w["process"] != "ou" or not w["shared_path"] or w["scheme"] != "euler_maruyama":
        raise ValueError("same_path_runs: needs weights.process = 'ou', scheme "
                         "'euler_maruyama' and weights.shared_path = true")
    dW, dt_fine = study_brownian_path(cfg, max(0, max(halvings)))
    P = int(cfg["solver"]["paths"])
    dW = np.broadcast_to(dW[:, None], (dW.shape[0], P, *dW.shape[1:]))
    out = {}
    for j in halvings:
        c = copy.deepcopy(cfg)
        c["solver"]["dt"] = float(cfg["solver"]["dt"]) * 2.0 ** (-j)
        re_ = int(cfg["solver"]["record_every"]) * 2.0 ** j
        if re_ != int(re_):
            raise ValueError(f"same_path_runs: record_every * 2^{j} is not a whole number")
        c["solver"]["record_every"] = int(re_)
        proc = DrivenOU(dW, dt_fine, rate=w["rate"], mean=w["mean"], noise_var=w["noise_var"])
        res = Simulation(c, process=proc).run()
        out[c["solver"]["dt"]] = Laplacian.entry(point, c, res.arrays)
    return out


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

    # ------------------------------------------------------------------ refinement
    @staticmethod
    def refined_task(name, cfg, halvings):
        """The task ``(name, cfg)`` at step ``dt / 2**halvings`` (records at the same times);
        the name's ``-dt=…`` suffix names the new step."""
        c = copy.deepcopy(cfg)
        f = 2 ** int(halvings)
        c["solver"]["dt"] = float(cfg["solver"]["dt"]) / f
        c["solver"]["record_every"] = int(cfg["solver"]["record_every"]) * f
        new = re.sub(r"-dt=[^-]+$", "", name) + f"-dt={c['solver']['dt']:g}"
        return new, _config.validate(c)

    def refine(self, outdir, options=None, points=None, halvings=1):
        r"""Rerun ``points`` at finer steps into the study's ``outdir`` and summarise again.

        Each chosen point, run at Δt and Δt/2 by the study, is run at
        :math:`\Delta t/2^{1+j}`, j = 1 … ``halvings`` (Δt/4 with the default); refinements
        already in ``outdir`` are kept and complete runs are not redone. The summary then
        reports every point from its two finest steps (``dt`` and ``dt_coarse`` columns).

        Parameters
        ----------
        outdir : path-like
            The directory of a finished run of this study (same ``options``).
        options : StudyOptions, optional
            The options of that run (scale, overrides, executor, ...).
        points : iterable of (d, sign, values, k), optional
            Default: the points ``outdir/summary.csv`` lists as unresolved.
        halvings : int
            How many further halvings of the finest step to run (≥ 1).

        Returns
        -------
        StudyResult
        """
        options = options or StudyOptions()
        if int(halvings) < 1:
            raise ValueError(f"halvings = {halvings!r}: must be an integer >= 1")
        outdir = Path(outdir)
        tasks = self.tasks(options)
        if points is None:
            with open(outdir / "summary.csv", newline="", encoding="utf-8") as fh:
                points = [(int(r["d"]), r["sign"], r["values"], int(r["k"]))
                          for r in csv.DictReader(fh) if r["resolved"] != "True"]
        points = {tuple(p) for p in points}
        finest = {}
        for name, cfg in tasks:
            key = _key(cfg)
            if key not in finest or cfg["solver"]["dt"] < finest[key][1]["solver"]["dt"]:
                finest[key] = (name, cfg)
        unknown = points - set(finest)
        if unknown:
            raise ValueError(f"points {sorted(unknown)} are not points of this study")
        extra = []
        for key, (name, cfg) in finest.items():
            for j in range(1, 31):
                task = self.refined_task(name, cfg, j)
                if (key in points and j <= int(halvings)) or (outdir / f"{task[0]}.h5").exists():
                    extra.append(task)
                elif j > int(halvings):
                    break
        return run_study(self, outdir, options, tasks=tasks + extra)

    # ------------------------------------------------------------------ reading
    def series(self, data):
        """``{(d, sign, values, k): {dt: {"t", "variance", "spectral_rank", "n_clusters",
        "anova" (dict of (records,)), "X_final", "labels"}}}`` from the result files."""
        from wflow.storage.io import read

        out = {}
        for (point, cfg), path in zip(data.tasks, data.paths):
            _, arr, _ = read(path)
            out.setdefault(_key(cfg), {})[float(cfg["solver"]["dt"])] = self.entry(point, cfg,
                                                                                   arr)
        return out

    @staticmethod
    def entry(point, cfg, arr):
        """One run of :meth:`series` from its configuration and arrays (``t``, ``X``, the
        :data:`MEASURES` series)."""
        labels = class_labels(cfg)
        return {"point": point, "t": np.asarray(arr["t"]), "labels": labels,
                "H": int(cfg["model"]["heads"]), "X_final": np.asarray(arr["X"][-1]),
                "anova": anova_split(arr["X"], labels),
                **{m: np.asarray(arr[m]) for m in MEASURES}}

    def summarize(self, data):
        """Per point at T: the mean over sequences of the measures (95% t-interval over the
        sequences) and the batch ANOVA — fractions part/total, total and between-class
        variance (95% jackknife Student-t over the sequences, :func:`anova_ci`) — at the finest
        step run (``dt``; Δt/2 unless refined) with |value(dt_coarse) − value(dt)|, dt_coarse
        the next coarser step (the check); ``unresolved`` names the numbers whose change
        exceeds their interval (a number without an interval, fewer than 3 sequences per
        class, is not checked: "no CI")."""
        text, table = self.table(self._runs(data))
        self._table = (data, text, table)
        return text, table

    def table(self, runs):
        """``(text, table)`` of :meth:`summarize` from ``runs`` as :meth:`series` returns
        them (``{key: {dt: run}}``)."""
        cols = ["d", "sign", "values", "k", "H", "dt", "dt_coarse"]
        for m in MEASURES + BATCH:
            cols += [m, f"{m}_ci", f"{m}_dt_change"]
        cols += ["total_0", "between_class_0", "resolved", "unresolved", "anova_identity_err"]
        table = {c: [] for c in cols}
        heads = ("var_within", "PCs99", "clusters", "within/tot", "btw_seq/tot", "btw_cls/tot",
                 "total", "btw_cls")
        lines = ["Laplacian heads: values at T (the finest step run, dt) ± 95% interval over the "
                 "sequences; Δ = |value(2 dt) − value(dt)|; 'unresolved' lists the numbers with "
                 "Δ > interval",
                 f"{'d':>2} {'sign':<8}{'values':<19}{'k/H':>5}{'dt':>9}"
                 + "".join(f"{h:>19}" for h in heads) + "  unresolved"]
        for key in sorted(runs, key=lambda k: (k[0], k[1], FULL_GRID["model.values"].index(k[2])
                                               if k[2] in FULL_GRID["model.values"] else 9, k[3])):
            by_dt = runs[key]
            dts = sorted(by_dt)
            fine, coarse = by_dt[dts[0]], by_dt[dts[min(1, len(dts) - 1)]]
            d, sign, values, k = key
            row = {"d": d, "sign": sign, "values": values, "k": k, "H": fine["H"],
                   "dt": dts[0], "dt_coarse": dts[min(1, len(dts) - 1)]}
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
                if np.isfinite(cis[j]) and not ch <= cis[j]:  # no interval: not checked
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
                if not np.isfinite(row[m + "_ci"]):
                    return f"{row[m]:.3g} (no CI)"
                return f"{row[m]:.3g}±{row[m + '_ci']:.2g}"

            frac = f"{k}/{row['H']}"
            lines.append(f"{d:>2} {sign:<8}{values:<19}{frac:>5}{dts[0]:>9.3g}"
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
        return "\n".join(lines), table

    def _runs(self, data):
        """:meth:`series`, read once per ``data`` (summarize and figures share it)."""
        cached = getattr(self, "_series_cache", None)
        if cached is None or cached[0] is not data:
            self._series_cache = cached = (data, self.series(data))
        return cached[1]

    @staticmethod
    def equivalence(runs):
        """max |X_T − X'_T| between (every head Laplacian, V = −I) and (no Laplacian head,
        V = +I) per (d, sign), at the smallest Δt both were run at."""
        out = {}
        for (d, sign, values, k), by_dt in runs.items():
            other = runs.get((d, sign, "identity", 0))
            common = sorted(set(by_dt) & set(other or ()))
            if values == "minus_identity" and common and k == by_dt[common[0]]["H"]:
                dt = common[0]
                out[(d, sign)] = float(np.max(np.abs(by_dt[dt]["X_final"]
                                                     - other[dt]["X_final"])))
        return out

    def figures(self, data, outdir, formats):
        from wflow.figures import laplacian as figs

        runs = self._runs(data)
        cached = getattr(self, "_table", None)
        table = cached[2] if cached is not None and cached[0] is data else self.summarize(data)[1]
        outdir = Path(outdir)
        return (figs.final_vs_fraction(table, outdir, formats)
                + figs.within_variance_time(runs, outdir, formats)
                + figs.anova_time(runs, outdir, formats))
