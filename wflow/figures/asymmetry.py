r"""Figures of the ``asymmetry`` study: clustering against the antisymmetric fraction α of
:math:`D(\alpha) = \sqrt{1-\alpha^2}\,I + \alpha A` and the layer-norm placement."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import DPI, _save

__all__ = ["plot_asymmetry"]

FIGSIZE = (12.0, 4.0)
_MARK = {"post": "o", "pre": "s", "peri": "D", "ngpt": "v", "mix": "^"}


def _points(ax, x, ivs, T, color, marker, label, ls="-"):
    """Estimates with error bars; censored estimates (``inf``) as open markers at T."""
    x = np.asarray(x, dtype=float)
    est = np.array([iv.estimate for iv in ivs], dtype=float)
    fin = np.isfinite(est)
    yerr = np.array([iv.errorbar() for iv in ivs], dtype=float).T.reshape(2, -1)
    ax.errorbar(x[fin], est[fin], yerr=yerr[:, fin], fmt=marker, ls=ls, color=color, ms=4,
                capsize=2, lw=1, label=label)
    up = [iv.high for iv in ivs]  # an interval open above: an arrow-like cap at T
    open_hi = fin & ~np.isfinite(np.asarray(up, dtype=float))
    if np.any(open_hi):
        ax.plot(x[open_hi], [T] * int(open_hi.sum()), "_", color=color, ms=8)
    if np.any(~fin):
        ax.plot(x[~fin], [T] * int((~fin).sum()), marker, color=color, ms=6, mfc="none")


def plot_asymmetry(cells, outdir, formats=("png",), censored=None):
    """``asymmetry.<fmt>``, three panels.

    (a) the phase diagram of post-LN: :math:`t_{1/2}` of the pooled merged fraction against
    α, one colour per β, with the 95% bootstrap intervals (open markers at T: not reached);
    (b) the placements: Kaplan–Meier median half-merge time against α at the common window
    (post censored there), one marker per placement, solid for the largest β, dashed for the
    smallest; (c) the pooled merged fraction F(t) of post-LN at the largest β, one curve per α,
    with ± 2 SE bands.

    Parameters
    ----------
    cells : dict ``(placement, α, β) -> cell`` (:meth:`wflow.studies.asymmetry.Asymmetry.cells`).
    censored : callable ``(cell, T) -> (km_half, km_one)``, the KM medians of a cell censored
        at T (:meth:`~wflow.studies.asymmetry.Asymmetry.censored`).
    """
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    post = {k: c for k, c in cells.items() if k[0] == "post"}
    betas = sorted({k[2] for k in post})
    T = max((c["T"] for c in post.values()), default=1.0)
    for i, beta in enumerate(betas):
        keys = sorted(k for k in post if k[2] == beta)
        _points(ax1, [k[1] for k in keys], [post[k]["t_half"] for k in keys], T, f"C{i}", "o",
                f"β = {beta:g}")
    ax1.axhline(T, color="0.6", lw=0.8, ls=":")
    ax1.set_yscale("log")
    ax1.set_xlabel("antisymmetric fraction α")
    ax1.set_ylabel("half-merge time t₁/₂ of the pooled fraction")
    ax1.set_title("(a) post-LN: t₁/₂ vs α (95% bootstrap; ○: > T)", fontsize=9)
    ax1.legend(fontsize=7)

    others = [k for k in cells if k[0] != "post"]
    if others and censored is not None:
        Tc = min(cells[k]["T"] for k in others)
        obetas = sorted({k[2] for k in others})
        alphas = sorted({k[1] for k in others})
        placements = [p for p in _MARK if any(k[0] == p for k in cells)]
        for j, p in enumerate(placements):
            for beta, ls in ((obetas[-1], "-"), (obetas[0], "--"))[: len(obetas)]:
                ks = [(p, a, beta) for a in alphas if (p, a, beta) in cells]
                if not ks:
                    continue
                ivs = [censored(cells[k], Tc)[0] for k in ks]
                lab = f"{p}, β = {beta:g}"
                _points(ax2, [k[1] + 0.01 * (j - 2) for k in ks], ivs, Tc, f"C{j}", _MARK[p],
                        lab, ls=ls)
        ax2.axhline(Tc, color="0.6", lw=0.8, ls=":")
        ax2.set_yscale("log")
        ax2.set_xlabel("antisymmetric fraction α")
        ax2.set_ylabel(f"KM median half-merge time τ (window T = {Tc:g})")
        ax2.set_title("(b) placements (95% KM band; ○: > T)", fontsize=9)
        ax2.legend(fontsize=6, ncol=2)
    else:
        ax2.set_axis_off()

    if betas:
        beta = betas[-1]
        keys = sorted(k for k in post if k[2] == beta)
        for i, k in enumerate(keys):
            c = post[k]
            t = c["t"]
            m = t > 0
            ax3.plot(t[m], c["F"][m], color=f"C{i}", lw=1.2, label=f"α = {k[1]:g}")
            if np.all(np.isfinite(c["se"])):
                ax3.fill_between(t[m], (c["F"] - 2 * c["se"])[m], (c["F"] + 2 * c["se"])[m],
                                 color=f"C{i}", alpha=0.2, lw=0)
        ax3.axhline(0.5, color="0.6", lw=0.8, ls=":")
        ax3.set_xscale("log")
        ax3.set_ylim(-0.02, 1.02)
        ax3.set_xlabel("t")
        ax3.set_ylabel("pooled merged fraction F(t)")
        ax3.set_title(f"(c) post-LN, β = {beta:g}: F(t) ± 2 SE", fontsize=9)
        ax3.legend(fontsize=7)
    return _save(fig, outdir, "asymmetry", formats)
