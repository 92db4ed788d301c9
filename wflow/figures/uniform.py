r"""Figures of the ``uniform`` study: growth rates λ_k of the uniform state's modes (measured
and derived), the zero crossing ν_c, and the stationary order parameter across ν_c."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import DPI, _save

__all__ = ["plot_uniform"]

FIGSIZE = (13.0, 3.8)
_COL = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def plot_uniform(ms, curves, branches, critical, outdir, formats=("png",)):
    r"""``uniform.<fmt>``: three panels.

    1. :math:`\lambda_k` against k at ν = 0 (markers: measured, ± SE; lines: derived), one
       colour per (normalisation, β), rates divided by :math:`\max_k\lambda_k` (derived);
    2. the mode-1 rate against :math:`\nu/\nu_c` (derived ν_c) with the fitted lines;
    3. the order parameter r at T against :math:`\nu/\nu_c` from the near-uniform (filled)
       and clustered (open) starts, particle runs (crosses), and the derived stationary
       branches (lines).

    Parameters
    ----------
    ms : dict task -> record (:meth:`wflow.studies.uniform.Uniform.measure`).
    curves : dict (norm, β) -> (k, λ_k) derived.
    branches : dict (norm, β) -> (r, ν(r), ν_c) derived stationary branches.
    critical : dict (norm, β) -> {"nu_c", "se", "slope", "derived"}.
    """
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for i, (key, (ks, lam)) in enumerate(sorted(curves.items())):
        pts = [r for n, r in ms.items() if n.startswith("growth") and not n.endswith(
            ("halfN", "halfdt")) and (r["norm"], r["beta"]) == key]
        if not pts:
            continue
        c = _COL[i % len(_COL)]
        scale = float(np.max(lam))
        ax1.plot(ks, lam / scale, "-" if key[0] == "head" else "--", color=c, lw=1,
                 label=f"{key[0]}, β = {key[1]:g}")
        kk = np.array([r["k"] for r in pts])
        ax1.errorbar(kk, np.array([r["rate"] for r in pts]) / scale,
                     yerr=np.array([r["se"] for r in pts]) / scale, fmt="o", color=c, ms=4)
    ax1.set_xlabel("mode k")
    ax1.set_ylabel(r"$\lambda_k / \max_k \lambda_k$ (derived)")
    ax1.set_title("rates at ν = 0: dots measured, lines derived", fontsize=9)
    ax1.legend(fontsize=7)
    for i, (key, cr) in enumerate(sorted(critical.items())):
        c = _COL[i % len(_COL)]
        pts = sorted((r["nu"], r["rate"], r["se"]) for n, r in ms.items()
                     if n.startswith("critical") and (r["norm"], r["beta"]) == key)
        nu, lam, se = (np.array(x) for x in zip(*pts))
        x = nu / cr["derived"]
        ax2.errorbar(x, lam / cr["derived"], yerr=se / cr["derived"], fmt="o", color=c, ms=4,
                     label=f"{key[0]}, β = {key[1]:g}: ν_c {cr['nu_c']:.4f} "
                           f"({cr['derived']:.4f})")
        xx = np.linspace(x.min(), x.max(), 20)
        ax2.plot(xx, cr["slope"] * (xx - cr["nu_c"] / cr["derived"]), "-", color=c, lw=1)
    ax2.axhline(0, color="0.5", lw=0.5)
    ax2.axvline(1, color="0.5", lw=0.5, ls=":")
    ax2.set_xlabel(r"$\nu/\nu_c$ (derived $\nu_c$)")
    ax2.set_ylabel(r"mode-1 rate $/\nu_c$")
    ax2.set_title("ν_c: zero of the mode-1 rate (legend: measured (derived))", fontsize=8)
    ax2.legend(fontsize=7)
    for i, (key, (rv, nub, nuc)) in enumerate(sorted(branches.items())):
        c = _COL[i % len(_COL)]
        ax3.plot(nub / nuc, rv, "-", color=c, lw=1, label=f"{key[0]}, β = {key[1]:g}")
        ax3.plot([0, 1.3], [0, 0], "-", color="0.6", lw=0.5)
        for start, mk in (("uniform", "o"), ("clustered", "s")):
            pts = sorted((r["nu"], r["r"]) for n, r in ms.items() if n.startswith("sweep")
                         and (r["norm"], r["beta"]) == key and r["start"] == start)
            if pts:
                nu, r = (np.array(x) for x in zip(*pts))
                ax3.plot(nu / nuc, r, mk, color=c, ms=5,
                         mfc=c if start == "uniform" else "none")
        pts = sorted((r["nu"], float(np.mean(r["r"]))) for n, r in ms.items()
                     if n.startswith("particles") and (r["norm"], r["beta"]) == key)
        if pts:
            nu, r = (np.array(x) for x in zip(*pts))
            ax3.plot(nu / nuc, r, "x", color=c, ms=6)
    ax3.set_xlabel(r"$\nu/\nu_c$")
    ax3.set_ylabel(r"$r = |\langle e^{i\theta}\rangle|$ at T")
    ax3.set_title("r at T: ● uniform start, □ clustered,\n× particles, — derived branch",
                  fontsize=8)
    if branches:
        ax3.legend(fontsize=7)
    return _save(fig, outdir, "uniform", formats)
