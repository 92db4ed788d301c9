r"""Figures of the ``heads`` study (:mod:`wflow.studies.heads`).

- ``heads_scaling``: late-window :math:`G^2`, :math:`G^2_{hm}` and :math:`\mathcal D`
  against H on log–log axes, one colour per family; error bars are the 95% intervals of the
  mean over paths; dashed lines the fits :math:`aH^b`, b with its 95% interval in the
  legend; for the spread phases (not a power law) also the fit over :math:`H \ge 4`
  (dotted, :math:`G^2` panel).
- ``heads_scan``: b of OU against ``weights.noise_var`` (β = 1) and against β (noise 2),
  with the 95% intervals.
- ``heads_design``: the per-path late-window :math:`G^2` of the 2 × 2 design of the
  initial draws (per-path tokens × per-path weights) at each H, mean with its 95%
  interval.

Every interval is the study's :class:`~wflow.analysis.intervals.Interval` and the figures print its
label (the summary prints the same numbers with the same label).

Reads the study's analysis (``Heads.analyse``) and what the study hands with it (its
families, quantities and the β × noise scan: ``Heads.figures``); it imports nothing of the
study.
"""

from __future__ import annotations

import matplotlib
import numpy as np

from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_COL = {"ou": _C["blue"], "shared": _C["red"], "spread": _C["green"]}
_LAB = {"ou": "OU", "shared": "oscillating, shared phase", "spread": "oscillating, spread phases"}
_TEX = {"G2": "$G^2$", "G2_hm": "$G^2_{hm}$", "dissipation": r"$\mathcal{D}$"}


def _fig(w, h):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=DPI, layout="constrained")


def _err(ivs):
    """Asymmetric error bars (2, k) of intervals; zero where there is none."""
    return np.array([iv.errorbar() for iv in ivs], dtype=float).T.reshape(2, -1)


def _fmt_b(f):
    if f is None:
        return "no fit"
    if f.ok:
        return f"$b = {f.estimate:.3f}$ [{f.low:.3f}, {f.high:.3f}]\n({f.label})"
    return f"$b = {f.estimate:.3f}$ ({f.label})"


def scaling(r, outdir, formats):
    groups, means, fits = r["groups"], r["means"], r["fits"]
    fams = [f for f in r["families"] if f in groups]
    with matplotlib.rc_context(_STYLE):
        fig = _fig(13.5, 4.4)
        axes = fig.subplots(1, len(r["quantities"]), sharex=True)
        for ax, (c, _) in zip(axes, r["quantities"]):
            for f in fams:
                Hs = np.array(sorted(groups[f]), dtype=float)
                ivs = [means[f, int(H), c] for H in Hs]
                est = np.array([iv.estimate for iv in ivs])
                ax.errorbar(Hs, est, yerr=_err(ivs), fmt="o", ms=4, capsize=3,
                            lw=1.0, color=_COL[f], label=f"{_LAB[f]}: {ivs[0].label}")
                fit = fits.get((f, c))
                if fit is not None:
                    hh = np.geomspace(Hs.min() / 1.2, Hs.max() * 1.2, 50)
                    ax.plot(hh, fit.extra["a"] * hh ** fit.estimate, ls="--", lw=1.0,
                            color=_COL[f], label=f"fit $aH^b$: {_fmt_b(fit)}")
                tail = fits.get((f, c, "tail"))
                if tail is not None and f == "spread":  # not a power law: show the tail too
                    hh = np.geomspace(4 / 1.2, Hs.max() * 1.2, 20)
                    ax.plot(hh, tail.extra["a"] * hh ** tail.estimate, ls=":", lw=1.2,
                            color=_COL[f],
                            label=f"fit over $H \\geq 4$: {_fmt_b(tail)}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo / 20, hi)  # room for the legend below the points
            ax.set_xlabel("number of heads $H$")
            ax.set_ylabel(f"late-window mean {_TEX[c]} ($t \\geq T/2$)")
            ax.set_title(_TEX[c])
            ax.legend(loc="lower left", fontsize=6.5)
        fig.suptitle("Head-count scaling: error bars 95% CI of the mean (Student-t, log scale); "
                     "[ ] on b 95% CI (jackknife Student-t over paths, a path left out at "
                     "every H at once)")
        return _save(fig, outdir, "heads_scaling", formats)


def scan(r, outdir, formats):
    rows = [(v, b, f) for v, b, f in r["scan"] if f is not None]
    if not rows:
        return []
    colours = (_C["blue"], _C["orange"], _C["green"], _C["red"])
    with matplotlib.rc_context(_STYLE):
        fig = _fig(6.0, 3.8)
        ax = fig.subplots()
        betas = sorted({b for _, b, _ in rows})
        for j, beta in enumerate(betas):
            sel = [(v, f) for v, b, f in rows if b == beta]
            v = np.array([x for x, _ in sel]) * (1.06 ** (j - (len(betas) - 1) / 2))  # dodge
            b_ = np.array([f.estimate for _, f in sel])
            ax.errorbar(v, b_, yerr=_err([f for _, f in sel]), fmt="o-", ms=5, capsize=3, lw=1.0,
                        color=colours[j % len(colours)], label=f"$\\beta = {beta:g}$")
        ax.axhline(-1.0, color=_C["grey"], lw=0.8, ls=":", label="$b = -1$")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("OU noise_var $g^2$")
        ax.set_ylabel("exponent $b$ of $G^2 \\approx aH^b$")
        ax.legend(loc="best", title=rows[0][2].label, title_fontsize=7)
        Hs = sorted(next(g for k, g in r["groups"].items() if k.startswith("scan_")))
        fig.suptitle(f"OU exponent on the noise × β grid, H ∈ {{{', '.join(map(str, Hs))}}}")
        return _save(fig, outdir, "heads_scan", formats)


def design(r, outdir, formats):
    groups = r["groups"]
    cells = [g for g in sorted(groups) if g.startswith(("cell_", "s6_"))]
    if not cells:
        return []
    Hs = sorted({(g.split("_")[0], H) for g in cells for H in groups[g]})
    with matplotlib.rc_context(_STYLE):
        fig = _fig(4.0 * len(Hs), 3.6)
        axes = np.atleast_1d(fig.subplots(1, len(Hs)))
        for ax, (kind, H) in zip(axes, Hs):
            names = [g for g in cells if g.startswith(kind) and H in groups[g]]
            for i, g in enumerate(names):
                y = groups[g][H]["G2"]
                x = i + np.linspace(-0.15, 0.15, y.size)
                ax.plot(x, y, "o", ms=3, color=_C["grey"], alpha=0.7,
                        label="one path" if i == 0 else None)
                iv = r["means"][g, H, "G2"]
                ax.errorbar([i + 0.3], [iv.estimate], yerr=_err([iv]), fmt="s", ms=5,
                            capsize=3, color=_C["blue"],
                            label="mean, 95% CI (Student-t, log scale)" if i == 0 else None)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels([f"tokens {'own' if g[-3] == '1' else 'shared'}\n"
                                f"D(0) {'own' if g[-1] == '1' else 'shared'}" for g in names],
                               fontsize=7)
            ax.set_ylabel("late-window mean $G^2$ per path")
            ax.set_title(("Section 6 base (n = 200)" if kind == "s6" else "study base")
                         + f", H = {H}")
            ax.legend(loc="best")
        fig.suptitle("Which draw carries the spread: per-path X0 and D(0) yes/no\n(where they "
                     "are shared, the interval is conditional on that one draw)")
        return _save(fig, outdir, "heads_design", formats)


def draw(r, outdir, formats):
    """All figures of the study; returns the files written."""
    return scaling(r, outdir, formats) + scan(r, outdir, formats) + design(r, outdir, formats)
