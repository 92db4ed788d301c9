"""Figures of the ``laplacian`` study: measures at T against the Laplacian fraction k/H, the
within-sequence variance over time, and the ANOVA split of a batch over time."""

from __future__ import annotations

import numpy as np

from wflow.figures import _figbase
from wflow.figures._figbase import _C, _STYLE
from wflow.model.diagnostics import ANOVA_PARTS

#: these multi-panel figures are drawn at 75 dpi (PNG < 300 kB)
DPI = 75

VALUE_COLOURS = {"tied": _C["black"], "minus_identity": _C["blue"], "identity": _C["red"],
                 "symmetric_gaussian": _C["green"]}
VALUE_LABELS = {"tied": "V = D (tied)", "minus_identity": "V = −I", "identity": "V = +I",
                "symmetric_gaussian": "V random symmetric"}
MEASURE_LABELS = {"variance": "within-sequence variance at T",
                  "spectral_rank": "PCs for 99% variance at T", "n_clusters": "clusters at T",
                  "within_sequence_frac": "within-sequence / total (batch)",
                  "between_class_frac": "between-class / total (batch)"}
PART_LABELS = {"within_sequence": "within sequence", "between_sequence": "between sequences",
               "between_class": "between classes"}
PART_COLOURS = {"within_sequence": _C["orange"], "between_sequence": _C["sky"],
                "between_class": _C["purple"]}


def _fig(w, h):
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_STYLE):
        w = max(w, 6.0)  # room for the title; margins in inches (constrained layout is slow)
        fig = Figure(figsize=(w, h), dpi=DPI)
        fig.subplots_adjust(left=1.0 / w, right=1 - 0.15 / w, bottom=0.5 / h, top=1 - 0.95 / h,
                            wspace=0.4, hspace=0.5)
        return fig


def _save(fig, outdir, kind, formats):
    return _figbase._save(fig, outdir, kind, formats, dpi=DPI)


def _panels(keys):
    return sorted({(d, s) for d, s, *_ in keys}, key=lambda x: (x[0], x[1] != "descent"))


def final_vs_fraction(table, outdir, formats):
    """Rows: the three per-sequence measures and two ANOVA fractions at T; columns: (d, sign);
    lines: the values; error bars: 95% t-intervals (measures) or jackknife Student-t intervals
    (fractions) over the sequences."""
    import matplotlib

    keys = list(zip(table["d"], table["sign"], table["values"], table["k"]))
    panels = _panels(keys)
    with matplotlib.rc_context(_STYLE):
        fig = _fig(2.7 * len(panels), 1.95 * len(MEASURE_LABELS) + 0.9)
        axes = fig.subplots(len(MEASURE_LABELS), len(panels), squeeze=False)
        for j, (d, sign) in enumerate(panels):
            for i, m in enumerate(MEASURE_LABELS):
                ax = axes[i, j]
                for v, col in VALUE_COLOURS.items():
                    rows = [r for r, kk in enumerate(keys) if kk[:3] == (d, sign, v)]
                    if not rows:
                        continue
                    x = np.array([table["k"][r] / table["H"][r] for r in rows])
                    y = np.array([table[m][r] for r in rows])
                    e = np.array([table[f"{m}_ci"][r] for r in rows])
                    o = np.argsort(x)
                    ax.errorbar(x[o], y[o], yerr=e[o], color=col, marker="o", ms=3, capsize=2,
                                label=VALUE_LABELS[v])
                ax.set_xlabel("Laplacian fraction k/H")
                ax.set_ylabel(MEASURE_LABELS[m])
                if i == 0:
                    ax.set_title(f"d = {d}, {sign}")
                if m == "variance":
                    ax.set_yscale("log")
        axes[0, 0].legend(loc="best")
        fig.suptitle("Laplacian heads at T: per-sequence measures (mean, 95% t-interval over "
                     "sequences)\nand batch ANOVA fractions (95% jackknife Student-t over sequences)")
        return _save(fig, outdir, "final_vs_fraction", formats)


def within_variance_time(runs, outdir, formats):
    """One figure per d: rows sign, columns values; lines k/H; mean over sequences of the
    within-sequence variance against t (the finest step run; dotted: the next coarser one)."""
    import matplotlib

    out = []
    ds = sorted({k[0] for k in runs})
    cmap = matplotlib.colormaps["viridis"]
    for d in ds:
        keys = [k for k in runs if k[0] == d]
        signs = sorted({k[1] for k in keys}, key=lambda s: s != "descent")
        vals = [v for v in VALUE_COLOURS if any(k[2] == v for k in keys)]
        ks = sorted({k[3] for k in keys})
        with matplotlib.rc_context(_STYLE):
            fig = _fig(2.9 * len(vals), 2.6 * len(signs) + 0.4)
            axes = fig.subplots(len(signs), len(vals), squeeze=False, sharex=True)
            for i, s in enumerate(signs):
                for j, v in enumerate(vals):
                    ax = axes[i, j]
                    for kk in ks:
                        by_dt = runs.get((d, s, v, kk))
                        if by_dt is None:
                            continue
                        dts = sorted(by_dt)
                        H = by_dt[dts[0]]["H"]
                        c = cmap(kk / max(H, 1) * 0.9)
                        r = by_dt[dts[0]]
                        ax.plot(r["t"], r["variance"].mean(axis=1), color=c,
                                label=f"k/H = {kk}/{H}")
                        r2 = by_dt[dts[min(1, len(dts) - 1)]]
                        ax.plot(r2["t"], r2["variance"].mean(axis=1), color=c, ls=":", lw=0.9)
                    ax.set_yscale("log")
                    ax.set_title(f"{s}, {VALUE_LABELS[v]}")
                    ax.set_xlabel("t")
                    ax.set_ylabel("within-sequence variance")
            axes[0, 0].legend(loc="lower left", fontsize=7)
            fig.suptitle(f"d = {d}: within-sequence variance 1 − |x̄|², mean over sequences\n"
                         "(solid: the finest step run, dotted: twice that step)")
            out += _save(fig, outdir, f"within_variance_time_d{d}", formats)
    return out


def anova_time(runs, outdir, formats):
    """Rows: values; columns: (d, sign); the ANOVA fractions part/total against t, solid
    without Laplacian heads (k = 0), dashed with all heads Laplacian (k = H)."""
    import matplotlib

    panels = _panels(runs)
    vals = [v for v in VALUE_COLOURS if any(k[2] == v for k in runs)]
    with matplotlib.rc_context(_STYLE):
        fig = _fig(3.0 * len(panels), 2.3 * len(vals) + 0.5)
        axes = fig.subplots(len(vals), len(panels), squeeze=False, sharex=True, sharey=True)
        for j, (d, s) in enumerate(panels):
            for i, v in enumerate(vals):
                ax = axes[i, j]
                ks = sorted(k[3] for k in runs if k[:3] == (d, s, v))
                if not ks:
                    continue
                for kk, ls in ((ks[0], "-"), (ks[-1], "--")):
                    by_dt = runs[(d, s, v, kk)]
                    r = by_dt[min(by_dt)]
                    a = r["anova"]
                    for p in ANOVA_PARTS:
                        ax.plot(r["t"], a[p] / a["total"], color=PART_COLOURS[p], ls=ls,
                                label=f"{PART_LABELS[p]}, k/H = {kk}/{r['H']}")
                ax.set_title(f"d = {d}, {s}, {VALUE_LABELS[v]}")
                ax.set_xlabel("t")
                ax.set_ylabel("fraction of total variance")
                ax.set_ylim(0, 1)
        axes[0, 0].legend(loc="best", fontsize=6)
        fig.suptitle("ANOVA of the batch (token-weighted, Euclidean): part / total\n"
                     "solid: no Laplacian head, dashed: all heads Laplacian")
        return _save(fig, outdir, "anova_time", formats)
