r"""Figures of the ``metastability`` study: the escape time :math:`\tau_{\mathrm{med}}(\beta)`
per d (Kaplan–Meier medians with their intervals, log scale), the fitted laws
:math:`\log\tau = a + b\beta` and the equiangular d → ∞ reference."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import DPI, _save

__all__ = ["plot_escape"]

FIGSIZE = (6.4, 4.4)


def plot_escape(cells, outdir, formats=("png",), labels=None):
    """``escape.<fmt>``: one colour per d, medians with error bars (censored cells as
    upward triangles at T), the fitted line over the fitted β range, and the equiangular
    time τ_∞(β) (black, dashed).

    Parameters
    ----------
    cells : dict ``d -> {"beta", "median" (Intervals), "fit" (Interval with extra["a"]),
        "tau_inf", "T", "n"}`` (:meth:`wflow.studies.metastability.Metastability.cells`).
    labels : dict ``d -> str``.
    """
    labels = labels or {}
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    T = None
    for i, d in enumerate(sorted(cells)):
        c = cells[d]
        col = f"C{i}"
        T = c["T"]
        b = np.asarray(c["beta"], dtype=float)
        med = [iv.estimate for iv in c["median"]]
        fin = [j for j, v in enumerate(med) if math.isfinite(v)]
        cen = [j for j, v in enumerate(med) if not math.isfinite(v)]
        yerr = np.array([c["median"][j].errorbar() for j in fin]).T.reshape(2, -1)
        ax.errorbar(b[fin], [med[j] for j in fin], yerr=yerr, fmt="o", color=col, ms=4,
                    capsize=2, label=labels.get(d, f"d = {d}"))
        if cen:
            ax.plot(b[cen], [T] * len(cen), "^", color=col, ms=5, mfc="none")
        f = c["fit"]
        if math.isfinite(f.estimate) and len(f.extra.get("betas", [])):
            xb = np.linspace(min(f.extra["betas"]), max(f.extra["betas"]), 50)
            ax.plot(xb, np.exp(f.extra["a"] + f.estimate * xb), "-", color=col, lw=1,
                    label=f"fit b = {f.fmt('.2f')}")
    c0 = cells[sorted(cells)[0]]
    ax.plot(c0["beta"], c0["tau_inf"], "k--", lw=1, label=f"equiangular d → ∞ (n = {c0['n']})")
    if T is not None:
        ax.axhline(T, color="0.6", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("β")
    ax.set_ylabel("escape (half-merge) time τ, KM median")
    ax.set_title("escape time vs β (95% KM log-log bands; ▲: > T)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return _save(fig, outdir, "escape", formats)
