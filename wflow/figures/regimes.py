"""Figures of the ``regimes`` study: heat maps of the regime map, one figure per slice.

Per sign (head normalisation): rows β, columns the weight families, one panel per statistic
(fraction with one cluster by T, Kaplan–Meier median time to one cluster, final cluster
count, order parameter, late-window G², G² decay rate, late W₂ speed), each with its colour
bar; each cell is annotated with its value. A statistic has one colour scale across all the
figures (the cluster count's always reaches down to one cluster), so equal colours mean equal
values from panel to panel. The joint slice: rows (normalisation, sign) at
the joint β, the same panels. Input: the study's table (:meth:`Regimes.table`).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm, Normalize, TwoSlopeNorm
from matplotlib.figure import Figure

from wflow.figures import _figbase
from wflow.figures._figbase import _STYLE

__all__ = ["draw", "PANELS"]

#: statistic → (panel title, colour map, scale): "lin01" [0, 1], "log", "lin", "div" (around 0)
PANELS = {
    "frac_one": ("fraction of paths with one cluster by T", "viridis", "lin01"),
    "km_median": ("KM median time to one cluster (hatched: > T)", "magma_r", "lin"),
    "n_clusters": ("clusters at T (mean over paths)", "cividis", "log"),
    "order_parameter": ("order parameter |x̄| at T (mean)", "viridis", "lin01"),
    "G2": ("late-window G² (t ≥ T/2, mean)", "plasma", "log"),
    "G2_decay": ("G² decay rate −d log G²/dt, late (mean)", "RdBu_r", "div"),
    "w2_speed": ("late W₂ speed (mean)", "plasma", "log"),
}
DPI = 100


def _norm(scale, vals, floor=None):
    """The colour scale of a statistic over ``vals`` (every cell of every figure: comparable
    panels share it); a single value sits mid-scale, not at an end."""
    v = vals[np.isfinite(vals)]
    if scale == "lin01":
        return Normalize(0.0, 1.0)
    if floor is not None:
        v = np.append(v, floor)
    if scale == "log":
        v = v[v > 0]
        if v.size == 0:
            return Normalize(0.0, 1.0)
        lo, hi = float(v.min()), float(v.max())
        return LogNorm(lo, hi) if hi > lo else LogNorm(lo / 3.0, lo * 3.0)
    if scale == "div":
        m = float(np.max(np.abs(v))) if v.size else 1.0
        return TwoSlopeNorm(0.0, -m or -1.0, m or 1.0)
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    return Normalize(lo, hi) if hi > lo else Normalize(lo - 0.5, lo + 0.5)


#: the value a statistic's colour scale always includes (one cluster is the floor of the count)
FLOORS = {"n_clusters": 1.0}


def _shown(stat, values, T):
    shown = np.array(values, dtype=float)
    if stat == "km_median":
        shown[np.isinf(shown)] = T  # "> T" drawn at T, hatched
    return shown


def _text(stat, v):
    if stat == "km_median" and math.isinf(v):
        return ">T"
    if not np.isfinite(v):
        return "–"
    if stat in ("frac_one", "order_parameter"):
        return f"{v:.2f}"
    return f"{v:.2g}"


def _heatmap(fig, ax, grid, stat, rows, cols, T, norm):
    title, cmap, scale = PANELS[stat]
    inf = np.isinf(grid)
    shown = _shown(stat, grid, T)
    masked = np.ma.masked_invalid(shown)
    if scale == "log":
        masked = np.ma.masked_where(~(shown > 0), shown)
    cm = matplotlib.colormaps[cmap].with_extremes(bad="0.85")
    im = ax.imshow(masked, cmap=cm, norm=norm, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if stat == "km_median" and inf[i, j]:
            ax.add_patch(matplotlib.patches.Rectangle((j - .5, i - .5), 1, 1, fill=False,
                                                      hatch="//", lw=0, color="0.5"))
        rgba = cm(norm(shown[i, j])) if np.isfinite(shown[i, j]) else (0.85,) * 3
        lum = 0.3 * rgba[0] + 0.6 * rgba[1] + 0.1 * rgba[2]
        ax.text(j, i, _text(stat, v), ha="center", va="center", fontsize=6.5,
                color="white" if lum < 0.5 else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=35, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(title, fontsize=8)
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)


def _figure_of(table, select, rows, row_label, title, T, norms, labels):
    """One figure: a panel per statistic; ``select(i) -> row index or None`` for table row i;
    ``labels``: weight family → column label, in column order."""
    present = set(table["weights"])
    wnames = [w for w in labels if w in present] + sorted(present - set(labels))
    fig = Figure(figsize=(17.0, 7.6), dpi=DPI)
    axes = fig.subplots(2, 4)
    for k, stat in enumerate(PANELS):
        grid = np.full((len(rows), len(wnames)), np.nan)
        for i in range(len(table["point"])):
            r = select(i)
            if r is None:
                continue
            grid[r, wnames.index(table["weights"][i])] = table[stat][i]
        ax = axes.flat[k]
        _heatmap(fig, ax, grid, stat, rows, [labels.get(w, w) for w in wnames], T, norms[stat])
        ax.set_xlabel("weight process")
        ax.set_ylabel(row_label)
    ax = axes.flat[-1]
    ax.axis("off")
    ax.text(0.0, 0.95, title + "\n\nCells: means over paths;\nfraction and KM median over "
            "paths\n(KM: Kaplan–Meier, censored at T).\nGrey: undefined (no finite value).\n"
            "95% intervals: regimes.md / summary.txt.", va="top", fontsize=8,
            transform=ax.transAxes)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.95, wspace=0.45, hspace=0.55)
    return fig


def draw(table, outdir, formats=("png",), labels=None):
    """Write ``regimes_<sign>.<fmt>`` per sign and ``regimes_joint_slice.<fmt>``; the files.
    ``labels``: weight family → column label, in column order (the study's
    ``WEIGHT_LABELS``; default: the names as they come)."""
    labels = dict(labels or {})
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    idx = [i for i in range(len(table["point"])) if not table["halved"][i]]
    T = float(np.nanmax(table["T"])) if table.get("T") else math.nan
    if not np.isfinite(T):
        finite = [table["km_median_hi"][i] for i in idx if np.isfinite(table["km_median_hi"][i])]
        T = max(finite) if finite else 1.0
    out = []
    norms = {stat: _norm(PANELS[stat][2], _shown(stat, [table[stat][i] for i in idx], T),
                         FLOORS.get(stat)) for stat in PANELS}  # one scale across the figures
    with matplotlib.rc_context(_STYLE):
        for sign in ("descent", "ascent"):
            head = [i for i in idx if table["sign"][i] == sign
                    and table["normalization"][i] == "head"]
            if not head:
                continue
            betas = sorted({table["beta"][i] for i in head})
            rows = [f"{b:g}" for b in betas]
            fig = _figure_of(table, lambda i, s=sign, h=set(head), b=betas:
                             b.index(table["beta"][i]) if i in h else None,
                             rows, "β (inverse temperature)",
                             f"Regime map on S², {sign}, head normalisation", T, norms,
                             labels)
            out += _save(fig, outdir, f"regimes_{sign}", formats)
        joint = [i for i in idx if table["normalization"][i] == "joint"]
        if joint:
            jb = table["beta"][joint[0]]
            keys = [(n, s) for s in ("descent", "ascent") for n in ("head", "joint")]
            sel = {i: keys.index((table["normalization"][i], table["sign"][i])) for i in idx
                   if table["beta"][i] == jb}
            fig = _figure_of(table, sel.get, [f"{n}, {s}" for n, s in keys],
                             "normalisation, sign", f"Head vs joint normalisation, β = {jb:g}",
                             T, norms, labels)
            out += _save(fig, outdir, "regimes_joint_slice", formats)
    return out


def _save(fig, outdir, kind, formats):
    return _figbase._save(fig, outdir, kind, formats, dpi=DPI)
