r"""Figures of the ``meanfield`` and ``meanfield_s2`` studies: the smooth distance
:math:`\mathcal D_4(\mu^n_t, \rho(t))` between n particles and the spectral density against
n on log–log axes (mean over samples with 95% t-intervals, the fitted :math:`Cn^a`, the
density's own error L against 2L as a horizontal line) per configuration, and the growth of
the fluctuations per degree against :math:`e^{2\sigma\lambda_\ell T}` of [model §6c]."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from wflow.analysis.results import mean_ci
from wflow.figures._figbase import _C, _STYLE, DPI, _save

__all__ = ["draw"]

_COLOURS = [_C[k] for k in ("blue", "orange", "green", "red", "purple", "sky", "black", "grey")]


def draw(res, fits, growth, outdir, formats=("png",), name="meanfield"):
    """``<name>.<fmt>``: left, D against n at the last record time for every configuration;
    right, the measured growth factor of :math:`n e_\\ell^2` from 0 to T against the
    prediction. Returns the files written."""
    t = res["t"]
    r_last = len(t) - 1
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(10.4, 4.2), dpi=DPI, layout="constrained")
        ax, ax_g = fig.subplots(1, 2)
        for j, (cname, r) in enumerate(res["cfg"].items()):
            col = _COLOURS[j % len(_COLOURS)]
            n = np.asarray(r["n"], dtype=float)
            vals = [r["D"][int(k)][r_last] for k in r["n"]]
            m = np.array([v.mean() for v in vals])
            ci = np.array([mean_ci(v) for v in vals])
            a, C, (lo, hi) = fits[cname][float(t[r_last])]["D"]
            dodge = 1.05 ** (j - 1.5)
            ax.errorbar(n * dodge, m, yerr=ci, fmt="o", ms=4, color=col, capsize=2,
                        label=f"{cname}: a = {a:.3f} [{lo:.3f}, {hi:.3f}]")
            ax.plot(n, C * n ** a, "-", color=col, lw=1)
            ax.axhline(float(np.max(r["density"]["D"])), color=col, ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("particles n")
        ax.set_ylabel(f"D(μⁿ_t, ρ(t)) at t = {t[r_last]:g}")
        ax.set_title("first harmonics against the spectral density (dotted: L vs 2L)")
        ax.legend(fontsize=6.5, title="fit C n^a, 95% jackknife-t", title_fontsize=6.5)
        xs, k = [], 0
        for j, (cname, rows) in enumerate(growth.items()):
            col = _COLOURS[list(res["cfg"]).index(cname) % len(_COLOURS)]
            for ell, (G, (lo, hi), p) in rows.items():
                x = k
                ax_g.errorbar([x], [G], yerr=[[G - lo], [hi - G]], fmt="o", ms=4, color=col,
                              capsize=2, label=cname if ell == 1 else None)
                ax_g.plot([x - 0.35, x + 0.35], [p, p], "k-", lw=1.2,
                          label="exp(2σλ_ℓT), model §6c" if (j == 0 and ell == 1) else None)
                xs.append((x, f"ℓ={ell}"))
                k += 1
            k += 1
        ax_g.set_xticks([x for x, _ in xs], [s for _, s in xs], fontsize=6.5)
        ax_g.set_yscale("log")
        ax_g.set_ylabel("mean n e_ℓ²(T) / mean n e_ℓ²(0)")
        ax_g.set_title(f"growth of the fluctuations to T = {t[r_last]:g} (D = I)")
        ax_g.legend(fontsize=6.5)
        return _save(fig, outdir, name, formats)
