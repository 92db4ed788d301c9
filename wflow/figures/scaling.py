r"""The head-count figure: late-window :math:`G^2` against H with the fit :math:`aH^b`
(``head_scaling``); see :mod:`wflow.figures.plotting`."""

from __future__ import annotations

import matplotlib
import numpy as np

from wflow.analysis.results import head_scaling_data
from wflow.figures import _figbase
from wflow.figures._figbase import (
    _C,
    _STYLE,
    FIGSIZE,
    _check_formats,
    _figure,
)


def _wrap_label(text, width):
    """``text`` broken into lines of at most ``width`` characters between its comma-separated
    parts (never inside a ``$…$`` formula, which holds no ", " here)."""
    out = []
    for line in text.split("\n"):  # lines the label already has are kept
        lines = [""]
        for part in line.split(", "):
            if lines[-1] and len(lines[-1]) + 2 + len(part) > width:
                lines[-1] += ","
                lines.append("    " + part)
            else:
                lines[-1] += (", " if lines[-1] else "") + part
        out += lines
    return "\n".join(out)


def plot_head_scaling(sources, outdir=".", window=None, formats=("png", "pdf")):
    r"""Log–log plot of late-window :math:`G^2` against the head count H with the fit :math:`aH^b`.

    Parameters
    ----------
    sources : list or dict
        Paths, Results or (config, arrays) pairs, one per head count (runs with equal H
        are pooled). A dict ``{label: list}`` draws one series with its own fit per
        label (e.g. OU against oscillating weights).
    outdir : path-like
    window : None, float or (float, float)
        The late window, see :func:`head_scaling_data` (default :math:`t \ge T/2`).
    formats : sequence of str

    Returns
    -------
    list of Path
        ``head_scaling.<fmt>``. With a single head count only the point is drawn and
        the title says that more runs are needed. The points, their intervals, the fit and
        the interval of b are :func:`head_scaling_data`'s (:mod:`wflow.analysis.intervals`), and
        the legend prints each interval's label (method, paths, conditional on what): the
        same numbers and labels as the ``section6`` summary. Without an interval (two paths)
        no bar is drawn and the label says "too few paths".
    """
    formats = _check_formats(formats)
    groups = sources if isinstance(sources, dict) else {None: list(sources)}
    colours = [_C["blue"], _C["red"], _C["green"], _C["orange"], _C["purple"], _C["sky"]]
    with matplotlib.rc_context(_STYLE):
        fig = _figure("head_scaling", layout="constrained")
        ax = fig.add_subplot()
        fitted, handles = 0, []
        wtxt = ("$t \\geq T/2$" if window is None else
                f"$t \\geq {float(window):g}$" if np.ndim(window) == 0 else
                f"${window[0]:g} \\leq t \\leq {window[1]:g}$")
        for j, (label, srcs) in enumerate(groups.items()):
            c = colours[j % len(colours)]
            dat = head_scaling_data(srcs, window)
            H, mean, ivs = dat["H"], dat["mean"], dat["intervals"]
            pre = f"{label}: " if label is not None else ""
            yerr = np.array([iv.errorbar() for iv in ivs], dtype=float).T.reshape(2, -1)
            what = "; ".join(dict.fromkeys(iv.label for iv in ivs))
            handles.append(ax.errorbar(H, mean, yerr=yerr, fmt="o", color=c, ms=5, capsize=3,
                                       lw=1.0, label=f"{pre}mean $G^2$ over {wtxt}\n{what}"))
            fit = dat["fit"]
            if fit is not None:
                a, b = fit.extra["a"], fit.estimate
                hh = np.geomspace(H.min() / 1.3, H.max() * 1.3, 50)
                btxt = (f"$b = {b:.3f}$ [{fit.low:.3f}, {fit.high:.3f}]" if fit.ok else
                        f"$b = {b:.3f}$")
                handles += ax.plot(hh, a * hh ** b, color=c, ls="--", lw=1.0,
                                   label=f"{pre}fit $aH^b$: $a = {a:.3g}$, {btxt}\n({fit.label})")
                fitted += 1
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("number of heads $H$")
        ax.set_ylabel(r"time-averaged $G^2$")
        if fitted == 0:
            ax.set_title("one head count only: more runs (different $H$) are needed for a fit")
            lo, hi = ax.get_xlim()
            ax.set_xlim(min(lo, H.min() / 3), max(hi, H.max() * 3))
        else:
            ax.set_title("Head-count scaling of the squared metric speed")
        # below the axes, one entry per line: long labels never squash the axes or run
        # off the canvas; the figure grows by the legend's height
        labels = [_wrap_label(h.get_label(), 78) for h in handles]
        fig.set_figheight(FIGSIZE["head_scaling"][1] + 0.16 * sum(1 + lb.count("\n")
                                                                  for lb in labels))
        fig.legend(handles, labels, loc="outside lower center", ncols=1)
        return _figbase._save(fig, outdir, "head_scaling", formats)
