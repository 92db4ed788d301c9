r"""Figures of the ``meanfield_s2`` study: :math:`W_2` between n particles and the large-n
particle reference on :math:`S^2` (raw, against subsamples of size m, and with the subsample
floor removed) and the energy error, against n on log–log axes; means over seeds with 95%
t-intervals, the fitted laws :math:`Cn^a` and :math:`C\sqrt{\log n/n}`, the floor
:math:`\sqrt F` and the reference's energy spread as horizontal lines."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from wflow.analysis.intervals import mean_interval
from wflow.analysis.results import mean_ci
from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_COLOURS = [_C[k] for k in ("blue", "orange", "green", "red", "purple")]


def draw(res, fits, outdir, formats=("png",)):
    """``meanfield_s2.<fmt>``: W₂ (left) and |ΔE| (right) against n at the first and last
    record. Returns the files written."""
    t = res["t"]
    n = np.asarray(res["n"], dtype=float)
    recs = sorted({0, len(t) - 1})
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(10.4, 4.2), dpi=DPI, layout="constrained")
        ax_w, ax_e = fig.subplots(1, 2)
        for j, r in enumerate(recs):
            col = _COLOURS[j % len(_COLOURS)]
            f = fits[float(t[r])]
            dodge = 1.04 ** (2 * j - 1)
            raw = [np.sqrt(res["w2sq_raw"][int(k)][r]) for k in res["n"]]
            ax_w.errorbar(n * dodge, [v.mean() for v in raw],
                          yerr=np.array([mean_interval(v).errorbar() for v in raw]).T,
                          fmt="o", mfc="none", ms=4, color=col, capsize=2,
                          label=f"t = {t[r]:g}: W₂(μⁿ, ν_m) raw; a = {f['w2'][0]:.3f} "
                                f"[{f['w2'][2][0]:.3f}, {f['w2'][2][1]:.3f}]")
            cor = [res["w2sq"][int(k)][r] for k in res["n"]]
            mc = np.array([c.mean() for c in cor])
            wc = np.sqrt(np.maximum(mc, 1e-300))
            err = np.array([mean_ci(c) for c in cor]) / (2 * wc)  # δ(√y) ≈ δy/(2√y)
            ax_w.errorbar(n * dodge, wc, yerr=err, fmt="s", ms=4, color=col, capsize=2,
                          label=f"t = {t[r]:g}: floor removed √(W₂² − F)")
            if f["w2sq"] is not None:
                a, C, (lo, hi) = f["w2sq"]
                ax_w.plot(n, C * n**a, "-", color=col, lw=1,
                          label=f"  fit C n^a: a = {a:.3f}, 95% CI (jackknife t) [{lo:.3f}, {hi:.3f}]")
            if f["w2sq_log"] is not None:
                a, C, (lo, hi) = f["w2sq_log"]
                ax_w.plot(n, C * np.sqrt(np.log(n)) * n**a, ":", color=col, lw=1.2,
                          label=f"  fit C √(log n) n^a: a = {a:.3f} [{lo:.3f}, {hi:.3f}]")
            ax_w.axhline(float(np.sqrt(res["floor"][r].mean())), color=col, ls="--", lw=0.8,
                         label=f"t = {t[r]:g}: subsample floor √F (m = {res['m']})")
            dE = [np.abs(res["dE"][int(k)][r]) for k in res["n"]]
            a, C, (lo, hi) = f["dE"]
            ivs = [mean_interval(v, unit="seeds") for v in dE]  # positive: log-scale t
            ax_e.errorbar(n * dodge, [iv.estimate for iv in ivs],
                          yerr=np.array([iv.errorbar() for iv in ivs]).T,
                          fmt="o", ms=4, color=col, capsize=2,
                          label=f"t = {t[r]:g}: mean over seeds, {ivs[0].label}")
            ax_e.plot(n, C * n**a, "-", color=col, lw=1,
                      label=f"  fit C n^a: a = {a:.3f}, 95% CI (jackknife t) [{lo:.3f}, {hi:.3f}]")
            if res["R"] > 1:
                sd = float(res["E_ref"][r].std(ddof=1) / np.sqrt(res["R"]))
                ax_e.axhline(sd, color=col, ls="--", lw=0.8,
                             label=f"t = {t[r]:g}: reference energy s.e. ({res['R']} refs)")
        m0 = np.mean(np.abs(res["dE"][int(res["n"][0])][0]))
        ax_e.plot(n, m0 * (n / n[0]) ** -0.5, "k--", lw=1, label="n^(−1/2)")
        for ax, ylab in ((ax_w, "W₂ on S² (rad)"), (ax_e, "|E[μⁿ_t] − mean E[μ^ref_t]|")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("particles n")
            ax.set_ylabel(ylab)
            ax.legend(fontsize=6)
        ax_w.set_title(f"W₂ to the particle reference (n_ref = {res['n_ref']}, "
                       f"{res['R']} refs; POT on m = {res['m']})", fontsize=9)
        ax_e.set_title("energy error against the references' mean", fontsize=9)
        return _save(fig, outdir, "meanfield_s2", formats)
