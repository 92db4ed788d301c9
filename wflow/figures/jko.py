r"""Figures of the ``jko`` study: error at T against Δt and against wall time for Euler, Heun,
RK4 and JKO, and the energy curves at the largest step (one column per case)."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_STY = {"euler": (_C["red"], "o"), "heun": (_C["orange"], "s"), "rk4": (_C["blue"], "^"),
        "jko": (_C["green"], "D")}


def draw(d, outdir, formats=("png",)):
    """``jko_errors.<fmt>`` (error vs Δt, error vs wall s; rows = cases) and
    ``jko_energy.<fmt>`` (E(t) at the largest Δt with the reference). Returns the files."""
    files = []
    cases = list(d)
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(9.6, 3.4 * len(cases)), dpi=DPI, layout="constrained")
        axes = np.atleast_2d(fig.subplots(len(cases), 2))
        for row, case in enumerate(cases):
            res = d[case]
            a1, a2 = axes[row]
            for m, runs in res["runs"].items():
                col, mk = _STY.get(m, ("k", "x"))
                dts = [r[0] for r in runs]
                errs = [r[1] for r in runs]
                walls = [r[2] for r in runs]
                a1.loglog(dts, errs, marker=mk, color=col, label=m)
                a2.loglog(walls, errs, marker=mk, color=col, label=m)
            for ax in (a1, a2):
                ax.axhline(res["refcheck"], color="0.5", ls=":", lw=1,
                           label="reference check (RK4 at 2Δt_ref)")
                ax.set_ylabel("error at T: max_i d_S(x_i, x_i^ref) (rad)")
                ax.legend(fontsize=7)
            a1.set_xlabel("Δt")
            a2.set_xlabel("time in the stepping loop (s)")
            a1.set_title(f"{case}: error at T against Δt")
            a2.set_title(f"{case}: error at T per wall-second")
        files += _save(fig, outdir, "jko_errors", formats)

        fig = Figure(figsize=(4.8 * len(cases), 3.6), dpi=DPI, layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(cases)))
        for ax, case in zip(axes, cases):
            res = d[case]
            t, _, E = res["ref"]
            ax.plot(t, E, color="k", lw=1, label=f"reference (RK4, Δt = {res['ref_dt']:g})")
            big = None
            for m, runs in res["runs"].items():
                col, mk = _STY.get(m, ("k", "x"))
                dt, _, _, tt, EE, _ = runs[0]
                big = dt
                ax.plot(tt, EE, marker=mk, ms=3, color=col, label=f"{m}, Δt = {dt:g}")
            ax.set_xlabel("t")
            ax.set_ylabel("energy E(X_k) (descent: must not rise)")
            ax.set_title(f"{case}: energy at the largest step Δt = {big:g}")
            ax.legend(fontsize=7)
        files += _save(fig, outdir, "jko_energy", formats)
    return files
