r"""The trajectory-order figure of the layer-norm placements [model §1c]: the error at T of
each placement's scheme against a tight reference, for several Δt, on log–log axes with the
slope fitted to it and the line :math:`C\Delta t^p` of the scheme's order p."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from wflow.figures._figbase import DPI, _check_formats, _save

__all__ = ["plot_placement_orders", "fitted_order"]

FIGSIZE = (5.6, 4.4)
_COL = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")


def fitted_order(dts, errors) -> float:
    r"""The least-squares slope of :math:`\log e` against :math:`\log\Delta t`."""
    return float(np.polyfit(np.log(np.asarray(dts, float)), np.log(np.asarray(errors, float)),
                            1)[0])


def plot_placement_orders(data, outdir=".", formats=("png",)):
    r"""``placement_orders.<fmt>``: the error at T against Δt per placement and scheme.

    Parameters
    ----------
    data : dict label -> (dts, errors, order)
        The step sizes, the errors :math:`\max\lvert y_{\Delta t}(T) - y_{\rm ref}(T)\rvert`
        and the scheme's stated order p; the legend prints the fitted slope beside p, and a
        dotted line of slope p passes through the finest point.
    outdir : path-like
    formats : sequence of str

    Returns
    -------
    list of Path
    """
    formats = _check_formats(formats)
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for i, (label, (dts, errors, order)) in enumerate(data.items()):
        dts, errors = np.asarray(dts, float), np.asarray(errors, float)
        c = _COL[i % len(_COL)]
        ax.loglog(dts, errors, "o-", color=c, ms=4,
                  label=f"{label}: slope {fitted_order(dts, errors):.2f} (order {order})")
        j = int(np.argmin(dts))
        ax.loglog(dts, errors[j] * (dts / dts[j]) ** order, ":", color=c, lw=1)
    ax.set_xlabel(r"step $\Delta t$")
    ax.set_ylabel(r"error at $T$ (max over tokens, directions and radii)")
    steps = np.unique(np.concatenate([np.asarray(v[0], float) for v in data.values()]))
    ax.xaxis.set_minor_formatter(NullFormatter())  # the steps themselves are the ticks
    ax.set_xticks(steps, [f"1/{round(1 / h)}" if abs(1 / h - round(1 / h)) < 1e-9 else f"{h:g}"
                          for h in steps])
    ax.set_title("layer-norm placements: order in Δt [model §1c]")
    ax.legend(fontsize=7)
    return _save(fig, outdir, "placement_orders", formats)
