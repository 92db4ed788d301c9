r"""Publication figures and token animations for wflow runs [model §8–10].

This is the only wflow module that imports matplotlib. It uses
:class:`matplotlib.figure.Figure` directly with the Agg canvas (no pyplot, no
global backend switch), so it runs headless; style settings are applied with
:func:`matplotlib.rc_context` and restored afterwards.

Every function takes a *source*: a path to an HDF5 result file (read with
:func:`wflow.storage.io.read`, imported lazily), a :class:`wflow.engine.run.Result`, or an
in-memory pair ``(config, arrays)`` (a triple ``(config, arrays, attrs)`` as
returned by :func:`wflow.storage.io.read` is accepted too).

Figures (one file ``<kind>.<fmt>`` per kind and format, fixed size and dpi):

``snapshots``
    tokens of one path at four record times (first, two intermediate, last): on a
    shaded unit sphere for d = 3, on the unit circle for d = 2, on the sphere of the
    first three principal coordinates (normalised) for d > 3.
``G2``
    :math:`G^2(t)`, :math:`G^2_{hm}(t)` and :math:`\mathcal D(t)` on a log axis: mean
    over paths with a min–max band.
``ledger``
    the exact ledger of [model §6] for one path: (a) :math:`\Delta E` against weight part
    + token part, (b) token part against :math:`\sigma\int\mathcal D` with the ledger
    residual :math:`R`, (c) the weight part split into drift, martingale and Itô.
``balance``
    the paper's balance for one path: :math:`\Delta E`, :math:`\sigma\int G^2`,
    :math:`\int\partial_tE`, :math:`\int\text{Itô}`, :math:`M` and the residual; below,
    :math:`\int G^2` against :math:`\int\mathcal D` and their gap.
``head_scaling``
    late-window time average of :math:`G^2` against H on log–log axes with the fit
    :math:`aH^b` (needs several runs, see :func:`plot_head_scaling`).
``clustering``
    order parameter, smallest cosine, number of clusters, variance, spectral rank.

Missing inputs (no stored tokens, ledger disabled so its series are NaN, ...) raise
:class:`PlotInputError` (a :class:`ValueError`) with a one-line message naming the
kind; ``kind="all"`` skips such kinds with a logged warning instead.
"""

from __future__ import annotations

import os
import shutil  # noqa: F401  (animation's ffmpeg lookup; tests patch plotting.shutil.which)

import matplotlib
import numpy as np

from wflow.lab._figbase import (  # noqa: F401
    _C,
    _STYLE,
    ANIMATION_DPI,
    ANIMATION_FIGSIZE,
    DPI,
    FIGSIZE,
    KINDS,
    PlotInputError,
    _band,
    _cfg,
    _check_formats,
    _circle_axes,
    _describe,
    _display_coords,
    _figure,
    _load,
    _path,
    _quiet_nanwarnings,
    _save,
    _scatter_circle,
    _scatter_sphere,
    _series,
    _sigma,
    _sphere_axes,
    _time,
    _token_colours,
    _tokens,
    log,
)
from wflow.lab.analysis import fit_power_law, head_scaling_data
from wflow.lab.animation import animate, frame_indices, plot_orders, plot_table_bars  # noqa: F401

_SOURCE_PARAMS = """

    Parameters
    ----------
    src : path, Result or (config, arrays)
    outdir : path-like
    formats : sequence of str

    Returns
    -------
    list of Path
    """


def _inputs(src, formats):
    """Checked formats, the source's config and arrays, and its record times."""
    formats = _check_formats(formats)
    config, arrays = _load(src)
    return formats, config, arrays, _time(arrays)


def _source_doc(fn):
    """Append the parameters every single-source figure shares to ``fn``'s docstring."""
    fn.__doc__ = (fn.__doc__ or "").rstrip() + _SOURCE_PARAMS
    return fn

__all__ = [
    "KINDS",
    "DPI",
    "FIGSIZE",
    "ANIMATION_FIGSIZE",
    "ANIMATION_DPI",
    "PlotInputError",
    "plot",
    "plot_snapshots",
    "plot_G2",
    "plot_ledger",
    "plot_balance",
    "plot_clustering",
    "plot_head_scaling",
    "plot_orders",
    "plot_table_bars",
    "head_scaling_data",
    "fit_power_law",
    "animate",
    "frame_indices",
]

#: the figure kinds, in the order ``kind="all"`` draws them
# ----------------------------------------------------------------------------- kinds
def plot_snapshots(src, outdir=".", formats=("png", "pdf"), path_index=0):
    """Tokens of one path at four record times (first, two intermediate, last).

    Parameters
    ----------
    src : path, Result or (config, arrays)
        The run; needs token snapshots ``X`` (records, P, n, d).
    outdir : path-like
        Output directory (created if needed).
    formats : sequence of str
        File formats, a subset of ``("png", "pdf", "svg")``.
    path_index : int
        Which Monte Carlo path to draw.

    Returns
    -------
    list of Path
        ``snapshots.<fmt>`` for each format.
    """
    formats = _check_formats(formats)
    config, arrays = _load(src)
    X = _tokens(arrays, "snapshots", path_index)
    t = _time(arrays)
    Y, note = _display_coords(X)
    idx = frame_indices(len(t), 4)
    colours = _token_colours(Y[0] if Y.shape[-1] == 3 else np.pad(Y[0], ((0, 0), (0, 1))))
    with matplotlib.rc_context(_STYLE):
        fig = _figure("snapshots")
        three = Y.shape[-1] == 3
        for j, r in enumerate(idx):
            if three:
                ax = fig.add_subplot(1, 4, j + 1, projection="3d")
                _sphere_axes(ax)
                _scatter_sphere(ax, Y[r], colours)
            else:
                ax = fig.add_subplot(1, 4, j + 1)
                _circle_axes(ax)
                _scatter_circle(ax, Y[r], colours)
            ax.set_title(f"$t = {t[r]:.3g}$", y=0.98 if three else 1.0)
        sphere_name = f"$S^{{{X.shape[-1] - 1}}}$"
        title = f"Tokens on {sphere_name} (path {path_index})\n{_describe(config, arrays)}"
        if note:
            title += f"\n({note})"
        fig.suptitle(title)
        top = (0.84 if three else 0.78) - (0.05 if note else 0.0)
        fig.subplots_adjust(left=0.0, right=1.0, bottom=0.0 if three else 0.03, top=top,
                            wspace=0.0)
        return _save(fig, outdir, "snapshots", formats)


@_source_doc
def plot_G2(src, outdir=".", formats=("png", "pdf")):
    r"""Squared metric speeds and dissipation over time on a log axis.

    Draws :math:`G^2` (arithmetic-mean mobility, the reference simulation's),
    :math:`G^2_{hm}` (harmonic-mean mobility :math:`\hat b`) and :math:`\mathcal D`:
    the mean over paths with a min–max band. Non-positive values are not drawn.
    """
    formats, config, arrays, t = _inputs(src, formats)
    curves = [("G2", r"$G^2$ (arithmetic $\bar m$)", _C["blue"]),
              ("G2_hm", r"$G^2_{\mathrm{hm}}$ (harmonic, $\hat b$)", _C["orange"]),
              ("dissipation", r"$\mathcal{D}$", _C["green"])]
    data = [(_series(arrays, k, "G2"), lab, c) for k, lab, c in curves]
    with matplotlib.rc_context(_STYLE):
        fig = _figure("G2", layout="constrained")
        ax = fig.add_subplot()
        for Y, lab, c in data:
            if np.any(Y <= 0):
                lab += " (values $\\leq 0$ not shown)"
            _band(ax, t, Y, c, lab, positive=True)
        ax.set_yscale("log")
        ax.set_xlabel("$t$")
        ax.set_ylabel(r"$G^2,\ G^2_{\mathrm{hm}},\ \mathcal{D}$")
        P = data[0][0].shape[1]
        ax.legend(loc="best", title="mean over paths" + (", band: min–max" if P > 1 else ""))
        fig.suptitle(f"Squared metric speeds and dissipation\n{_describe(config, arrays)}")
        return _save(fig, outdir, "G2", formats)


_LEDGER_HINT = " (diagnostics.ledger = false or causal mask: the exact ledger is not computed)"


def plot_ledger(src, outdir=".", formats=("png", "pdf"), path_index=0):
    r"""The exact energy ledger of [model §6] for one path, in three panels sharing t.

    (a) :math:`\Delta E = E(t) - E(0)` against weight part + token part (telescoping);
    (b) token part against :math:`\sigma\int_0^t\mathcal D\,ds` with the ledger residual
    :math:`R` on the right axis; (c) the weight part split into drift, martingale and
    realised Itô term.

    Parameters
    ----------
    src : path, Result or (config, arrays)
        Needs the ledger series (``diagnostics.ledger = true``).
    outdir : path-like
    formats : sequence of str
    path_index : int
        The path drawn (the ledger is a pathwise identity).

    Returns
    -------
    list of Path
    """
    formats, config, arrays, t = _inputs(src, formats)
    k = "ledger"
    s = {n: _path(_series(arrays, n, k, _LEDGER_HINT), path_index, k)
         for n in ("weight_work", "token_work", "drift_work", "martingale", "ito_realised",
                   "ledger_residual")}
    E = _path(_series(arrays, "energy", k), path_index, k)
    intD = _path(_series(arrays, "int_dissipation", k), path_index, k)
    sigma = _sigma(config)
    dE = E - E[0]
    sg = "-" if sigma < 0 else "+"
    with matplotlib.rc_context(_STYLE):
        fig = _figure("ledger", layout="constrained")
        axs = fig.subplots(3, 1, sharex=True)
        a = axs[0]
        a.plot(t, dE, color=_C["black"], label=r"$\Delta E = E(t)-E(0)$")
        tel = np.nanmax(np.abs(dE - s["weight_work"] - s["token_work"]))
        a.plot(t, s["weight_work"] + s["token_work"], color=_C["orange"], ls="--",
               label=f"weight part + token part (max gap {tel:.1g})")
        a.plot(t, s["token_work"], color=_C["blue"], lw=1.0, alpha=0.8, label="token part")
        a.plot(t, s["weight_work"], color=_C["red"], lw=1.0, alpha=0.8, label="weight part")
        a.set_ylabel("energy change")
        a.set_title(f"(a) telescoping: $\\Delta E$ = weight part + token part (path {path_index})",
                    loc="left")
        b = axs[1]
        b.plot(t, s["token_work"], color=_C["blue"], label="token part")
        b.plot(t, sigma * intD, color=_C["sky"], ls="--",
               label=f"$\\sigma\\int_0^t \\mathcal{{D}}\\,ds$ ($\\sigma = {sg}1$)")
        b.set_ylabel("energy change")
        br = b.twinx()
        br.grid(False)
        br.plot(t, s["ledger_residual"], color=_C["purple"], lw=1.0, label="residual $R$ (right)")
        br.set_ylabel("$R$", color=_C["purple"])
        br.tick_params(axis="y", colors=_C["purple"])
        br.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        h1, l1 = b.get_legend_handles_labels()
        h2, l2 = br.get_legend_handles_labels()
        b.legend(h1 + h2, l1 + l2, loc="best")
        b.set_title("(b) token part vs. chain rule $\\sigma\\int\\mathcal{D}$", loc="left")
        c = axs[2]
        c.plot(t, s["weight_work"], color=_C["red"], label="weight part")
        c.plot(t, s["drift_work"], color=_C["orange"], ls="--",
               label=r"drift $\sum\langle\partial_D E, f\,\Delta t\rangle$")
        c.plot(t, s["martingale"], color=_C["green"],
               label=r"martingale $\sum\langle\partial_D E, \xi_k\rangle$")
        c.plot(t, s["ito_realised"], color=_C["purple"], label="Itô (realised)")
        c.set_ylabel("energy change")
        c.set_xlabel("$t$")
        c.set_title("(c) weight part = drift + martingale + Itô", loc="left")
        for ax in (a, c):
            ax.legend(loc="best")
        fig.suptitle(f"Exact energy ledger\n{_describe(config, arrays)}")
        return _save(fig, outdir, "ledger", formats)


def plot_balance(src, outdir=".", formats=("png", "pdf"), path_index=0):
    r"""The paper's energy balance for one path, and :math:`\int G^2` vs :math:`\int\mathcal D`.

    Top: :math:`\Delta E`, :math:`\sigma\int G^2` (:math:`-\int G^2` for descent),
    :math:`\int\partial_tE`, :math:`\int\text{Itô}_{\text{expected}}`, :math:`M` and
    ``paper_residual`` :math:`= \Delta E - \sigma\int G^2 - \int\partial_tE - \int\text{Itô} - M`.
    Bottom: :math:`\int G^2`, :math:`\int\mathcal D` and the gap :math:`\int(G^2-\mathcal D)`.

    Parameters
    ----------
    src : path, Result or (config, arrays)
    outdir : path-like
    formats : sequence of str
    path_index : int

    Returns
    -------
    list of Path
    """
    formats, config, arrays, t = _inputs(src, formats)
    k = "balance"
    g = {n: _path(_series(arrays, n, k), path_index, k)
         for n in ("energy", "int_G2", "int_dEdt_drift", "int_ito_expected", "paper_martingale",
                   "paper_residual", "int_dissipation")}
    sigma = _sigma(config)
    dE = g["energy"] - g["energy"][0]
    sg = "-" if sigma < 0 else "+"
    with matplotlib.rc_context(_STYLE):
        fig = _figure("balance", layout="constrained")
        a, b = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        a.plot(t, dE, color=_C["black"], lw=1.8, label=r"$\Delta E = E(t)-E(0)$")
        a.plot(t, sigma * g["int_G2"], color=_C["blue"], label=f"${sg}\\int_0^t G^2\\,ds$")
        a.plot(t, g["int_dEdt_drift"], color=_C["orange"], label=r"$\int_0^t \partial_t E\,ds$")
        a.plot(t, g["int_ito_expected"], color=_C["green"],
               label=r"$\int_0^t \mathrm{Itô}_{\mathrm{expected}}\,ds$")
        a.plot(t, g["paper_martingale"], color=_C["purple"], label="$M$ (martingale)")
        a.plot(t, g["paper_residual"], color=_C["red"], ls="--", label="residual")
        a.set_ylabel("energy change")
        a.set_title(f"(a) $\\Delta E \\approx {sg}\\int G^2 + \\int\\partial_t E + "
                    f"\\int \\mathrm{{Itô}} + M$ (path {path_index})", loc="left")
        a.legend(loc="best", ncol=2)
        b.plot(t, g["int_G2"], color=_C["blue"], label=r"$\int_0^t G^2\,ds$")
        b.plot(t, g["int_dissipation"], color=_C["green"], ls="--",
               label=r"$\int_0^t \mathcal{D}\,ds$")
        b.plot(t, g["int_G2"] - g["int_dissipation"], color=_C["purple"],
               label=r"gap $\int_0^t (G^2-\mathcal{D})\,ds$")
        b.set_xlabel("$t$")
        b.set_ylabel("cumulative")
        b.set_title(r"(b) $G^2$ vs. the chain-rule dissipation $\mathcal{D}$", loc="left")
        b.legend(loc="best")
        fig.suptitle(f"The paper's energy balance\n{_describe(config, arrays)}")
        return _save(fig, outdir, "balance", formats)


_CLUSTER_PANELS = (
    ("order_parameter", r"order parameter $|\bar x|$"),
    ("min_cosine", r"smallest cosine $\min_{ij}\langle x_i,x_j\rangle$"),
    ("n_clusters", "number of clusters"),
    ("variance", r"variance $\frac{1}{n}\sum_i|x_i-\bar x|^2$"),
    ("spectral_rank", "components for 99% of variance"),
)


@_source_doc
def plot_clustering(src, outdir=".", formats=("png", "pdf")):
    """Clustering diagnostics of [model §8] over time, as small multiples.

    Each panel: mean over paths with a min–max band. Series absent from the source
    are left out; if none is present a :class:`PlotInputError` is raised.
    """
    formats, config, arrays, t = _inputs(src, formats)
    present = [(n, lab) for n, lab in _CLUSTER_PANELS if n in arrays]
    if not present:
        raise PlotInputError("clustering: the source has no clustering series "
                             "(diagnostics.clustering = false?)")
    data = [(_series(arrays, n, "clustering"), n, lab) for n, lab in present]
    with matplotlib.rc_context(_STYLE):
        fig = _figure("clustering", layout="constrained")
        axs = fig.subplots(2, 3, sharex=True).ravel()
        for ax, (Y, n, lab) in zip(axs, data):
            _band(ax, t, Y, _C["blue"], "mean over paths")
            ax.set_title(lab)
            if n in ("n_clusters", "spectral_rank"):
                ax.yaxis.get_major_locator().set_params(integer=True)
                lo, hi = np.nanmin(Y), np.nanmax(Y)
                if hi - lo < 4:
                    ax.set_ylim(lo - 1.5, hi + 1.5)
        for j, ax in enumerate(axs):
            if j >= len(data):
                ax.set_axis_off()
            elif j >= 3 or j + 3 >= len(data):
                ax.set_xlabel("$t$")
                ax.xaxis.set_tick_params(labelbottom=True)
        P = data[0][0].shape[1]
        note = "line: mean over paths" + (f"\nband: min–max over {P} paths" if P > 1 else "")
        ang = _cfg(config, "diagnostics", "cluster_angle", None)
        if ang is not None:
            note += f"\nclusters: components of $\\langle x_i,x_j\\rangle \\geq \\cos {ang:g}$"
        axs[-1].text(0.05, 0.5, note, transform=axs[-1].transAxes, va="center", ha="left",
                     fontsize=8, color=_C["grey"])
        fig.suptitle(f"Clustering diagnostics\n{_describe(config, arrays)}")
        return _save(fig, outdir, "clustering", formats)


# ----------------------------------------------------------------------------- head scaling
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
        the title says that more runs are needed. The fit itself is
        :func:`fit_power_law` applied to ``head_scaling_data(sources)["H"], ["mean"]``.
        Error bars: the 95% Student-t interval of the mean on the log scale
        (:func:`wflow.lab.analysis.log_mean_interval`, always positive), drawn only with
        ≥ 3 paths; with one or two paths the legend says "no CI" and none is drawn. The ±
        on b is the least-squares standard error of the slope (not a CI; none with two H).
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
            H, mean, lo, hi = dat["H"], dat["mean"], dat["low"], dat["high"]
            pre = f"{label}: " if label is not None else ""
            ok = np.isfinite(lo) & np.isfinite(hi)
            yerr = np.vstack([np.where(ok, mean - lo, 0.0), np.where(ok, hi - mean, 0.0)])
            P = dat["paths"]
            if np.all(ok):
                what = "95% CI (Student t on the log scale)"
            elif np.any(ok):
                what = "95% CI (Student t on the log scale) where ≥ 3 paths"
            else:  # one or two paths: no honest interval; say so instead of drawing one
                what = (f"{int(P.max())} path{'s' if P.max() > 1 else ''}: no CI")
            handles.append(ax.errorbar(H, mean, yerr=yerr, fmt="o", color=c, ms=5, capsize=3,
                                       lw=1.0, label=f"{pre}mean $G^2$ over {wtxt}, {what}"))
            if H.size >= 2:
                a, b, se = fit_power_law(H, mean)
                hh = np.geomspace(H.min() / 1.3, H.max() * 1.3, 50)
                setxt = ("" if not np.isfinite(se) else
                         f" ± {se:.2g} (± = standard error of the slope, {H.size} H values)")
                handles += ax.plot(hh, a * hh ** b, color=c, ls="--", lw=1.0,
                                   label=f"{pre}fit $aH^b$: $a = {a:.3g}$, $b = {b:.3f}${setxt}")
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
        ax.legend(handles=handles, loc="best")
        return _save(fig, outdir, "head_scaling", formats)


# ----------------------------------------------------------------------------- dispatch
_SINGLE = {
    "snapshots": lambda s, o, f, p: plot_snapshots(s, o, f, p),
    "G2": lambda s, o, f, p: plot_G2(s, o, f),
    "ledger": lambda s, o, f, p: plot_ledger(s, o, f, p),
    "balance": lambda s, o, f, p: plot_balance(s, o, f, p),
    "head_scaling": lambda s, o, f, p: plot_head_scaling([s], o, None, f),
    "clustering": lambda s, o, f, p: plot_clustering(s, o, f),
}


def plot(src, kind="all", outdir=".", formats=("png", "pdf"), path_index=0):
    """Draw figures of one run, one file ``<kind>.<fmt>`` per kind and format.

    Parameters
    ----------
    src : path, Result or (config, arrays)
        An HDF5 result file, a :class:`wflow.engine.run.Result` or ``(config, arrays)``.
    kind : str or list of str
        ``"all"``, one of :data:`KINDS`, or a list of them. ``"head_scaling"`` with one
        source draws a single point (use :func:`plot_head_scaling` with several runs).
    outdir : path-like
        Output directory (created if needed).
    formats : sequence of str
        Subset of ``("png", "pdf", "svg")``.
    path_index : int
        The path drawn by the pathwise figures (snapshots, ledger, balance).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    PlotInputError
        (a ValueError) when a requested kind lacks its inputs. With ``kind="all"`` such
        kinds are skipped with a logged warning; an error is raised only if none can be
        drawn.
    """
    formats = _check_formats(formats)
    if isinstance(src, (str, os.PathLike)):  # read the file once
        src = _load(src)
    everything = isinstance(kind, str) and kind == "all"
    kinds = list(KINDS) if everything else [kind] if isinstance(kind, str) else list(kind)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise PlotInputError(f"kind = {bad[0]!r}: allowed values are all, {', '.join(KINDS)}")
    out, skipped = [], []
    for k in kinds:
        try:
            out += _SINGLE[k](src, outdir, formats, path_index)
        except PlotInputError as e:
            if not everything:
                raise
            log.warning("plot: skipping %s", e)
            skipped.append(str(e))
    if not out:
        raise PlotInputError(f"plot: nothing could be drawn ({'; '.join(skipped)})")
    return out


