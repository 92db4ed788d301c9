r"""Figures of the ``meanfield`` study: :math:`W_2(\mu^n_t, \rho_h(t))` and
:math:`|E[\mu^n_t] - E_h(t)|` against n on log–log axes, mean over seeds with 95% t-intervals,
the fitted :math:`Cn^{a}` (bootstrap interval of a in the legend) and the :math:`n^{-1/2}`
reference; the PDE's mesh error (N against 2N) as a horizontal line."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from wflow.analysis.results import mean_ci
from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_COLOURS = [_C[k] for k in ("blue", "orange", "green", "red", "purple", "sky", "black", "grey")]


def _times(t, k=3):
    """Indices of up to k record times: the first, the last and one between."""
    idx = sorted({0, len(t) // 2, len(t) - 1})
    return idx[:k] if len(idx) > k else idx


def draw(res, fits, outdir, formats=("png",)):
    """``meanfield.<fmt>``: two panels (W₂, |ΔE|) against n at three record times. Returns
    the files written."""
    t = res["t"]
    n = np.asarray(res["n"], dtype=float)
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(10.4, 4.0), dpi=DPI, layout="constrained")
        axes = fig.subplots(1, 2)
        for key, ax, ylab in (("w2", axes[0], "W₂(μⁿ_t, ρ_h(t)) (rad)"),
                              ("dE", axes[1], "|E[μⁿ_t] − E_h(t)|")):
            for j, r in enumerate(_times(t)):
                col = _COLOURS[j % len(_COLOURS)]
                vals = [np.abs(res[key][int(k)][r]) for k in res["n"]]
                m = np.array([v.mean() for v in vals])
                ci = np.array([mean_ci(v) for v in vals])
                a, C, (lo, hi) = fits[float(t[r])][key]
                dodge = 1.04 ** (j - 1)  # side by side, the error bars apart
                ax.errorbar(n * dodge, m, yerr=ci, fmt="o", ms=4, color=col, capsize=2,
                            label=f"t = {t[r]:g}: mean over seeds ± 95% t-CI")
                ax.plot(n, C * n ** a, "-", color=col, lw=1,
                        label=f"fit C n^a: a = {a:.3f}, 95% CI (jackknife Student-t) [{lo:.3f}, {hi:.3f}]")
            r0 = _times(t)[0]
            m0 = float(np.mean(np.abs(res[key][int(res["n"][0])][r0])))
            ax.plot(n, m0 * (n / n[0]) ** -0.5, "k--", lw=1, label="n^(−1/2)")
            if "mesh" in res:
                me = res["mesh"][key]
                ax.axhline(float(np.max(me)), color=_C["grey"], ls=":", lw=1,
                           label=f"PDE mesh error (N = {res['mesh']['N']} vs "
                                 f"{res['N_fine']}), max over t")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("particles n")
            ax.set_ylabel(ylab)
            ax.legend(fontsize=6.5)
        axes[0].set_title("Wasserstein distance to the PDE (exact circle W₂)")
        axes[1].set_title("energy error of the particles")
        return _save(fig, outdir, "meanfield", formats)
