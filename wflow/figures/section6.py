"""Figures of the ``section6`` study across spheres: late-window G² against H with the fits."""

from __future__ import annotations

import numpy as np

from wflow.figures import _figbase
from wflow.figures._figbase import _C, _STYLE

#: one colour per sphere, one marker and line style per weight family
SPHERE_COLOURS = [_C["blue"], _C["red"], _C["green"], _C["orange"]]
FAMILY_STYLE = {"ou": ("o", "-"), "oscillating": ("s", "--")}


def head_scaling_compare(rows, outdir, formats, name="head_scaling_spheres", title=None):
    r"""Log–log late-window mean :math:`G^2` against H, one series per (sphere, family), with
    the least-squares fit :math:`aH^b` and b ± its 95% interval in the legend.

    Parameters
    ----------
    rows : list of dict
        ``{"sphere", "family", "H" (list), "G2" (list), "ci" (list, 95% half-widths; NaN: no
        bar), "a", "b", "b_ci"}``.
    outdir, formats
        As every figure function; returns the files written.
    """
    import matplotlib
    from matplotlib.figure import Figure

    spheres = list(dict.fromkeys(r["sphere"] for r in rows))
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(6.4, 4.6), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        for r in rows:
            c = SPHERE_COLOURS[spheres.index(r["sphere"]) % len(SPHERE_COLOURS)]
            mk, ls = FAMILY_STYLE.get(r["family"], ("^", ":"))
            H, m = np.asarray(r["H"], float), np.asarray(r["G2"], float)
            ci = np.asarray(r["ci"], float)
            lo = np.where(np.isfinite(ci), np.minimum(ci, 0.999 * m), 0.0)
            ax.errorbar(H, m, yerr=[lo, np.where(np.isfinite(ci), ci, 0.0)], fmt=mk, color=c,
                        capsize=3, ms=5, lw=1)
            h = np.geomspace(H.min(), H.max(), 50)
            ax.plot(h, r["a"] * h ** r["b"], ls=ls, color=c, lw=1.2,
                    label=f"{r['sphere']}, {r['family']}: b = {r['b']:.3f} ± {r['b_ci']:.2g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("head count H")
        ax.set_ylabel("late-window mean $G^2$ ($t \\geq T/2$)")
        ax.set_title(title or "Section 6: $G^2 = aH^b$ (bars: 95% intervals of the means)")
        ax.legend(fontsize=8, loc="lower left")
        return _figbase._save(fig, outdir, name, formats)
