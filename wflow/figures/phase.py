r"""Figures of the ``phase`` study: the pooled merged fraction F(β, t) as an image per d,
its standard error, and the half-merge time :math:`t_{1/2}(\beta)` with its interval."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import _C, DPI, _quiet_nanwarnings, _save

__all__ = ["plot_phase"]

FIGSIZE = (11.0, 3.4)  # inches per row (one row per d)


def _edges(v):
    """Cell edges around the centres ``v`` (uneven spacing allowed)."""
    v = np.asarray(v, dtype=float)
    if v.size == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = 0.5 * (v[1:] + v[:-1])
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def plot_phase(curves, half_times, outdir, formats=("png",)):
    """``phase.<fmt>``: per d a row with F(β, t) (image, colour bar, the points t_1/2),
    SE(β, t) (image, colour bar) and t_1/2(β) with its interval (censored values drawn as
    arrows at T), titled with the interval's level and method.

    Parameters
    ----------
    curves : dict ``(d, β, Δt) -> {"t", "F", "se", "T", "halved", ...}``
        (:meth:`wflow.studies.phase.Phase.curves`); the Δt/2 runs are drawn only in the
        t_1/2 panel.
    half_times : dict ``(d, β, Δt) -> Interval`` (:mod:`wflow.analysis.intervals`).
    """
    main = sorted(k for k, c in curves.items() if not c["halved"])
    # the adaptive mode (geometric records to T = 10³): logarithmic time axes
    adaptive = any(c.get("adaptive", False) for c in curves.values())
    dims = sorted({k[0] for k in main})
    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] * len(dims)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(dims), 3, squeeze=False)
    for row, d in enumerate(dims):
        keys = [k for k in main if k[0] == d]
        betas = np.array([k[1] for k in keys])
        t = curves[keys[0]]["t"]
        T = curves[keys[0]]["T"]
        F = np.array([np.interp(t, curves[k]["t"], curves[k]["F"]) for k in keys])
        S = np.array([np.interp(t, curves[k]["t"], curves[k]["se"]) for k in keys])
        P = curves[keys[0]]["f"].shape[1]
        # β values are not evenly spaced (0.1, 1, 2, ...): one row of cells per β, labelled
        rows = np.arange(len(betas))
        ax = axes[row, 0]
        im = ax.pcolormesh(_edges(t), _edges(rows), F, cmap="viridis", vmin=0, vmax=1,
                           shading="flat", rasterized=True)
        th = np.array([half_times[k].estimate for k in keys])
        fin = np.isfinite(th)
        ax.plot(th[fin], rows[fin], "o", ms=4, mfc="w", mec="k", mew=0.6,
                label="$t_{1/2}$ (F = 1/2)")
        if np.any(fin):
            ax.legend(loc="upper left" if adaptive else "lower right")
        ax.set_yticks(rows, [f"{b:g}" for b in betas])
        if adaptive:
            ax.set_xscale("log")
        ax.set_xlabel("time t")
        ax.set_ylabel("inverse temperature β")
        ax.set_title(f"d = {d}: pooled merged fraction F")
        ax.grid(False)
        fig.colorbar(im, ax=ax, label=r"fraction of pairs, $\langle x_i, x_j\rangle > 0.999$")
        ax = axes[row, 1]
        im = ax.pcolormesh(_edges(t), _edges(rows), S, cmap="magma", shading="flat",
                           rasterized=True)
        ax.set_yticks(rows, [f"{b:g}" for b in betas])
        if adaptive:
            ax.set_xscale("log")
        ax.set_xlabel("time t")
        ax.set_ylabel("inverse temperature β")
        ax.set_title(f"d = {d}: standard error of F, {P} systems")
        ax.grid(False)
        fig.colorbar(im, ax=ax, label="SE over systems")
        ax = axes[row, 2]
        for halved, colour, marker, lab in ((False, _C["blue"], "o", "Δt"),
                                             (True, _C["red"], "s", "Δt/2")):
            ks = sorted(k for k, c in curves.items() if k[0] == d and c["halved"] == halved)
            if not ks:
                continue
            b = np.array([k[1] for k in ks])
            th = np.array([half_times[k].as_tuple() for k in ks])
            fin = np.isfinite(th[:, 0])
            dt = ks[0][2]
            c0 = curves[ks[0]]
            name = (f"{c0['method']}, rtol = {c0['rtol']:g}" if c0.get("adaptive", False)
                    else f"{lab} = {dt:g}")
            if np.any(fin):
                hi = np.where(np.isfinite(th[fin, 2]), th[fin, 2], T)
                yerr = np.vstack([th[fin, 0] - th[fin, 1], hi - th[fin, 0]])
                ax.errorbar(b[fin] + (0.08 if halved else 0), th[fin, 0], yerr=yerr,
                            color=colour, marker=marker, ms=4, capsize=2, lw=1.0,
                            ls="none" if halved else "-", label=name)
            if np.any(~fin):
                ax.scatter(b[~fin] + (0.08 if halved else 0), np.full((~fin).sum(), T),
                           marker="^", color=colour, s=30,
                           label=f"{name}: > T = {T:g} (not reached)")
        ax.set_xlabel("inverse temperature β")
        ax.set_ylabel(r"half-merge time $t_{1/2}$")
        iv = half_times[keys[0]]
        ax.set_title(f"d = {d}: " + r"$t_{1/2}$" + f"\n{100 * iv.level:g}% CI, {iv.method}")
        if adaptive:
            ax.set_yscale("log")
            ax.set_ylim(1.0, T * 1.5)
        else:
            ax.set_ylim(0, T * 1.05)
        with _quiet_nanwarnings():
            ax.legend(loc="lower right", fontsize=7)
    return _save(fig, outdir, "phase", formats)
