r"""Figures of the ``stability`` study: δ(t)/ε and W₂/ε for perturbed inputs against the
Grönwall envelope :math:`e^{L_G t}`, and the convergence :math:`\max_t\delta \approx C\varepsilon^r`
for perturbed initial weights and weight decay."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_COLOURS = [_C[k] for k in ("blue", "orange", "green", "red", "purple", "sky", "black", "grey")]


def _family(curves, fam, half=False):
    return sorted((e, c) for (h, f, e), c in curves.items() if h == half and f == fam)


def draw(curves, rates, outdir, formats=("png",)):
    """``tokens.<fmt>`` (δ/ε and W₂/ε over t, path-mean, with the envelope) and
    ``weights.<fmt>`` (max_t δ against ε, both weight families, per-path fits). Returns files."""
    LG = float(np.mean(rates[False]["LG"]))
    files = []
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(13.2, 3.8), dpi=DPI, layout="constrained")
        ax1, ax2, ax3 = fig.subplots(1, 3)
        toks = _family(curves, "tokens")
        top = 1.0
        for j, (e, c) in enumerate(toks):
            col = _COLOURS[j % len(_COLOURS)]
            d = np.mean(c["delta"], axis=1) / e
            top = max(top, float(np.max(d)))
            ax1.plot(c["t"], d, color=col, label=f"ε = {e:.0e}")
            ax2.plot(c["t"], np.nanmean(c["w2"], axis=1) / e, color=col, label=f"ε = {e:.0e}")
            m = c["t"] > 0
            rate = np.log(c["delta"][m] / c["delta"][0]) / c["t"][m, None]
            ax3.plot(c["t"][m], np.mean(rate, axis=1), color=col, label=f"ε = {e:.0e}")
        if toks:
            t = toks[0][1]["t"]
            d0 = float(np.mean(toks[0][1]["delta"][0]) / toks[0][0])
            for ax in (ax1, ax2):
                ax.plot(t, d0 * np.exp(LG * t), "k--", lw=1,
                        label=f"δ(0)/ε · exp(L_G t), L_G = {LG:.3g}")
                ax.set_ylim(0.8, 3 * top)
            ax3.axhline(LG, color="k", ls="--", lw=1, label=f"L_G = {LG:.3g} (sup over t)")
            Lls = float(np.mean(rates[False]["Lls"]))
            ax3.axhline(Lls, color="k", ls=":", lw=1, label=f"L_ls = {Lls:.3g} (least squares)")
        ax1.set_yscale("log")
        ax2.set_yscale("log")
        for ax in (ax1, ax2, ax3):
            ax.set_xlabel("t")
        ax1.set_ylabel("δ(t)/ε,  δ = max_i d_S(x_i, x_i^ε)")
        ax2.set_ylabel("W₂(μ_t, μ_t^ε)/ε (geodesic cost)")
        ax3.set_ylabel("finite-time rate (1/t) log(δ(t)/δ(0))")
        ax1.set_title("max token distance / ε (mean over paths)")
        ax2.set_title("W₂ / ε (mean over paths)")
        ax3.set_title("growth rate (mean over paths)")
        for ax in (ax1, ax2, ax3):
            ax.legend(fontsize=6.5, ncol=2)
        files += _save(fig, outdir, "stability_tokens", formats)

        fig = Figure(figsize=(9.6, 3.8), dpi=DPI, layout="constrained")
        ax1, ax2 = fig.subplots(1, 2)
        for j, (e, c) in enumerate(_family(curves, "weights")):
            ax1.plot(c["t"], np.mean(c["delta"], axis=1), color=_COLOURS[j % len(_COLOURS)],
                     label=f"ε = {e:.0e}")
        ax1.set_yscale("log")
        ax1.set_xlabel("t")
        ax1.set_ylabel("δ(t) = max_i d_S(x_i, x_i^ε) (rad)")
        ax1.set_title("perturbed initial weights D(0) + εS (mean over paths)")
        ax1.legend(fontsize=7, ncol=2)
        for fam, col, mk in (("weights", _C["blue"], "o"), ("decay", _C["red"], "s")):
            fam_c = _family(curves, fam)
            if not fam_c:
                continue
            eps = np.array([e for e, _ in fam_c])
            dmax = np.array([np.max(c["delta"], axis=0) for _, c in fam_c])  # (ε, P)
            for p in range(dmax.shape[1]):
                ax2.loglog(eps, dmax[:, p], mk, color=col, ms=3, alpha=0.6,
                           label=None if p else f"{fam}: paths")
            r = rates[False].get(f"r_{fam}")
            C = rates[False].get(f"C_{fam}")
            if r is not None:
                ax2.loglog(eps, np.mean(C) * eps ** np.mean(r), "-", color=col, lw=1,
                           label=f"{fam}: fit C ε^r, r = {np.mean(r):.3f}")
        ax2.set_xlabel("ε (initial-weight perturbation, or weight decay rate)")
        ax2.set_ylabel("max_t δ(t) (rad)")
        ax2.set_title("convergence as ε → 0")
        ax2.legend(fontsize=7)
        files += _save(fig, outdir, "stability_weights", formats)
    return files
