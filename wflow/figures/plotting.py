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
    first three principal coordinates (normalised) for d > 3. A token keeps its colour,
    which encodes its position at t = 0 (hue = azimuth, brightness = height); the caption
    says so.
``G2``
    :math:`G^2(t)`, :math:`G^2_{hm}(t)` and :math:`\mathcal D(t)` on a log axis (symlog
    when a series has values ≤ 0, e.g. :math:`\mathcal D` with Laplacian heads): mean
    over paths with a min–max band; the late window :math:`t \ge T/2` (where the
    summaries average) shaded.
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
``density``
    a density run (``solver.representation = "density"``, [model §5b]) for one path: the
    cell averages :math:`\rho(\theta, t)` as a space–time image, and :math:`\rho` on the
    circle at four record times (radius :math:`1 + \rho/\max\rho`).

Every title names the heads (how many are Laplacian heads) and the run's parameters; a
figure of a file that is not complete (``running``: interrupted or in progress, or
``failed``) says so in its title and carries a "PARTIAL" watermark.

Missing inputs (no stored tokens, ledger disabled so its series are NaN, ...) raise
:class:`PlotInputError` (a :class:`ValueError`) with a one-line message naming the
kind; ``kind="all"`` skips such kinds with a logged warning instead.
"""

from __future__ import annotations

import os
import shutil  # noqa: F401  (animation's ffmpeg lookup; tests patch plotting.shutil.which)

import matplotlib
import numpy as np

from wflow.analysis.results import fit_power_law, head_scaling_data
from wflow.figures._figbase import (  # noqa: F401
    _C,
    _STYLE,
    _VIEW,
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
from wflow.figures.animation import animate, frame_indices, plot_orders, plot_table_bars  # noqa: F401

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


def _load_all(src):
    """``(config, arrays, attrs)``: a file is read with its attributes (status, ...); a
    ``(config, arrays, attrs)`` triple keeps them; other sources have none."""
    if isinstance(src, (str, os.PathLike)):
        from wflow.storage.io import read

        src = read(src)
    config, arrays = _load(src)
    if isinstance(src, (tuple, list)) and len(src) == 3 and isinstance(src[2], dict):
        attrs = src[2]
    else:
        attrs = dict(getattr(src, "attrs", None) or {})
    return config, arrays, attrs


def _inputs(src, formats):
    """Checked formats, the source's config, arrays and attributes, and its record times."""
    formats = _check_formats(formats)
    config, arrays, attrs = _load_all(src)
    return formats, config, arrays, attrs, _time(arrays)


def _heads(config) -> str:
    """``H = 4 attention heads`` / ``H = 4: 2 attention + 2 Laplacian heads``."""
    H = _cfg(config, "model", "heads", None)
    lap = _cfg(config, "model", "laplacian_heads", None) or []
    if H is None:
        return "H = ?"
    k = min(int(H), lap) if isinstance(lap, (int, np.integer)) else len(set(lap))
    if k == 0:
        return f"H = {H} attention head{'s' if H != 1 else ''}"
    if k == H:
        return f"H = {H} Laplacian head{'s' if H != 1 else ''}"
    return f"H = {H}: {H - k} attention + {k} Laplacian head{'s' if k != 1 else ''}"


def _status_note(attrs, arrays) -> str:
    """'' for a complete source; else what is partial about it, for the title."""
    status = attrs.get("status")
    if status in (None, "complete"):
        return ""
    n = len(np.asarray(arrays["t"]))
    expected = attrs.get("n_records_expected")
    of = f" of {int(expected)}" if expected is not None else ""
    what = "FAILED run" if status == "failed" else "PARTIAL (run not complete)"
    return f"{what}: {n}{of} records"


def _title(fig, head, config, arrays, attrs):
    """Suptitle: ``head``, the heads and run parameters, and the partial-file note (with a
    watermark across the figure)."""
    desc = _describe(config, arrays)
    rest = desc.split(", ", 1)[1] if desc.startswith("H = ") and ", " in desc else desc
    width = int(fig.get_figwidth() * 12)  # characters of the title font across the figure
    lines = [""]
    for part in f"{_heads(config)}, {rest}".split(", "):  # wrap between the parameters
        if lines[-1] and len(lines[-1]) + 2 + len(part) > width:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] += (", " if lines[-1] else "") + part
    text = head + "\n" + "\n".join(lines)
    note = _status_note(attrs, arrays)
    if note:
        text = f"{note}\n{text}"
        fig.text(0.5, 0.5, "PARTIAL", fontsize=60, color=_C["red"], alpha=0.12,
                 rotation=25, ha="center", va="center", zorder=0)
    fig.suptitle(text, color=_C["red"] if note else "black")
    return text


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
    "plot_density",
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
    config, arrays, attrs = _load_all(src)
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
        head = f"Tokens on {sphere_name} (path {path_index})" + (f" ({note})" if note else "")
        text = _title(fig, head, config, arrays, attrs)
        where = ("hue = azimuth, brightness = height" if three else "hue = angle on the circle")
        fig.text(0.5, 0.01, f"colour: each token's position at $t = {t[0]:.3g}$ ({where}"
                 + (", in the principal coordinates" if note else "") + "), kept over time"
                 + ("; faint dots: far side of the sphere" if three else ""),
                 ha="center", va="bottom", fontsize=8, color=_C["grey"])
        top = (0.84 if three else 0.78) - 0.05 * (text.count("\n") - 1)
        fig.subplots_adjust(left=0.0, right=1.0, bottom=0.05 if three else 0.08, top=top,
                            wspace=0.0)
        return _save(fig, outdir, "snapshots", formats)


@_source_doc
def plot_G2(src, outdir=".", formats=("png", "pdf")):
    r"""Squared metric speeds and dissipation over time.

    Draws :math:`G^2` (arithmetic-mean mobility, the reference simulation's),
    :math:`G^2_{hm}` (harmonic-mean mobility :math:`\hat b`) and :math:`\mathcal D`:
    the mean over paths with a min–max band, on a log axis; when a series has values
    :math:`\le 0` (:math:`\mathcal D` with Laplacian heads) on a symlog axis, linear within
    :math:`\pm` a threshold below the smallest magnitudes drawn, so that nothing is hidden.
    The late window :math:`t \ge T/2` over which the summaries average is shaded.
    """
    formats, config, arrays, attrs, t = _inputs(src, formats)
    curves = [("G2", r"$G^2$ (arithmetic $\bar m$)", _C["blue"]),
              ("G2_hm", r"$G^2_{\mathrm{hm}}$ (harmonic, $\hat b$)", _C["orange"]),
              ("dissipation", r"$\mathcal{D}$", _C["green"])]
    data = [(_series(arrays, k, "G2"), lab, c) for k, lab, c in curves]
    allv = np.concatenate([Y[np.isfinite(Y)].ravel() for Y, _, _ in data])
    signed = bool(np.any(allv <= 0))
    with matplotlib.rc_context(_STYLE):
        fig = _figure("G2", layout="constrained")
        ax = fig.add_subplot()
        T = float(_cfg(config, "solver", "T", t[-1]) or t[-1])
        if t[-1] > T / 2:
            ax.axvspan(T / 2, min(T, t[-1]), color=_C["grey"], alpha=0.12, lw=0,
                       label=r"late window $t \geq T/2$ (summary means)")
        for Y, lab, c in data:
            _band(ax, t, Y, c, lab, positive=not signed)
        if signed:
            mag = np.abs(allv[allv != 0])
            thresh = 10.0 ** np.floor(np.log10(np.quantile(mag, 0.05))) if mag.size else 1.0
            ax.set_yscale("symlog", linthresh=thresh, linscale=0.5)
            ax.axhline(0.0, color=_C["grey"], lw=0.6)
            scale = f" (symlog: linear within $\\pm${thresh:.0e})"
        else:
            ax.set_yscale("log")
            scale = ""
        ax.set_xlabel("$t$")
        ax.set_ylabel(r"$G^2,\ G^2_{\mathrm{hm}},\ \mathcal{D}$" + scale)
        P = data[0][0].shape[1]
        ax.legend(loc="best", title="mean over paths" + (", band: min–max" if P > 1 else ""))
        _title(fig, "Squared metric speeds and dissipation", config, arrays, attrs)
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
    formats, config, arrays, attrs, t = _inputs(src, formats)
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
        _title(fig, "Exact energy ledger", config, arrays, attrs)
        return _save(fig, outdir, "ledger", formats)


def plot_balance(src, outdir=".", formats=("png", "pdf"), path_index=0):
    r"""The paper's energy balance for one path, and :math:`\int G^2` vs :math:`\int\mathcal D`.

    Top: :math:`\Delta E`, :math:`\sigma\int G^2` (:math:`-\int G^2` for descent),
    :math:`\int\partial_tE`, :math:`\int\text{Itô}_{\text{expected}}`, :math:`M` and
    ``paper_residual`` :math:`= \Delta E - \sigma\int G^2 - \int\partial_tE - \int\text{Itô} - M`.
    Middle: the residual alone, on its own scale, with its final value and its share of
    :math:`\int_0^T G^2`. Bottom: :math:`\int G^2`, :math:`\int\mathcal D` and the gap
    :math:`\int(G^2-\mathcal D)`.

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
    formats, config, arrays, attrs, t = _inputs(src, formats)
    k = "balance"
    g = {n: _path(_series(arrays, n, k), path_index, k)
         for n in ("energy", "int_G2", "int_dEdt_drift", "int_ito_expected", "paper_martingale",
                   "paper_residual", "int_dissipation")}
    sigma = _sigma(config)
    dE = g["energy"] - g["energy"][0]
    sg = "-" if sigma < 0 else "+"
    with matplotlib.rc_context(_STYLE):
        fig = _figure("balance", layout="constrained")
        a, r, b = fig.subplots(3, 1, sharex=True, height_ratios=(3, 1.6, 2))
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
        # the residual on its own scale: beside the terms it would look closed
        res, tot = g["paper_residual"], g["int_G2"]
        r.axhline(0.0, color=_C["black"], lw=0.6)
        r.plot(t, res, color=_C["red"], ls="--")
        share = (rf", {100 * abs(res[-1]) / abs(tot[-1]):.2g}% of $\int_0^T G^2$"
                 if np.isfinite(res[-1]) and tot[-1] else "")
        r.set_title(f"(b) residual on its own scale: {res[-1]:.3g} at $t = {t[-1]:.3g}${share}",
                    loc="left")
        r.set_ylabel("residual")
        b.plot(t, g["int_G2"], color=_C["blue"], label=r"$\int_0^t G^2\,ds$")
        b.plot(t, g["int_dissipation"], color=_C["green"], ls="--",
               label=r"$\int_0^t \mathcal{D}\,ds$")
        b.plot(t, g["int_G2"] - g["int_dissipation"], color=_C["purple"],
               label=r"gap $\int_0^t (G^2-\mathcal{D})\,ds$")
        b.set_xlabel("$t$")
        b.set_ylabel("cumulative")
        b.set_title(r"(c) $G^2$ vs. the chain-rule dissipation $\mathcal{D}$", loc="left")
        b.legend(loc="best")
        _title(fig, "The paper's energy balance", config, arrays, attrs)
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
    formats, config, arrays, attrs, t = _inputs(src, formats)
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
            ax.ticklabel_format(axis="y", useOffset=False)  # 0.9999 shown as is, not +1
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
        _title(fig, "Clustering diagnostics", config, arrays, attrs)
        return _save(fig, outdir, "clustering", formats)


# ----------------------------------------------------------------------------- head scaling
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
        return _save(fig, outdir, "head_scaling", formats)


def plot_density(src, outdir=".", formats=("png", "pdf"), path_index=0):
    r"""The density on the circle (or the sphere) over time, for one path of a density run
    [model §5b].

    On S² (d = 3): the Voronoi mesh of the run (rebuilt from ``density.cells`` and
    ``density.lloyd``) coloured by ρ at four record times, one colour scale.

    Left: :math:`\rho(\theta, t)` (cell averages, angle against time, colour bar). Right:
    :math:`\rho` at four record times drawn on the circle as the curve
    :math:`(1 + \rho(\theta)/\max\rho)\,(\cos\theta, \sin\theta)` (the unit circle dotted).

    Parameters
    ----------
    src : path, Result or (config, arrays)
        The run; needs the density snapshots ``rho`` (records, P, N).
    outdir, formats : as for every figure.
    path_index : int
        Which Monte Carlo path (weight-noise path) to draw.

    Returns
    -------
    list of Path
        ``density.<fmt>`` for each format.
    """
    formats, config, arrays, attrs, t = _inputs(src, formats)
    if arrays.get("rho") is None:
        raise PlotInputError("density: no density snapshots 'rho' in the source (a density "
                             "run, solver.representation = 'density', with output.store_tokens)")
    R = np.asarray(arrays["rho"], dtype=float)
    if R.ndim != 3 or not 0 <= path_index < R.shape[1]:
        raise PlotInputError(f"density: 'rho' has shape {R.shape}, path_index = {path_index}")
    R = R[:, path_index]
    N = R.shape[-1]
    if int(config.get("model", {}).get("d", 2)) == 3:
        return _plot_density_s2(config, arrays, attrs, t, R, outdir, formats, path_index)
    theta = 2 * np.pi * (np.arange(N) + 0.5) / N
    with matplotlib.rc_context(_STYLE):
        fig = _figure("density", layout="constrained")
        ax, axc = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
        edges_t = np.concatenate([t, [t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0)]])
        im = ax.pcolormesh(edges_t, 2 * np.pi * np.arange(N + 1) / N, R.T, cmap="viridis",
                           shading="flat", rasterized=True)
        fig.colorbar(im, ax=ax, label=r"$\rho$ (cell average, per radian)")
        ax.set_xlabel("$t$")
        ax.set_ylabel(r"angle $\theta$")
        ax.set_yticks(np.pi * np.arange(5) / 2,
                      ["0", r"$\pi/2$", r"$\pi$", r"$3\pi/2$", r"$2\pi$"])
        ax.set_title(r"$\rho(\theta, t)$")
        ring = np.linspace(0, 2 * np.pi, 200)
        axc.plot(np.cos(ring), np.sin(ring), ":", color="0.6", lw=0.8, label="unit circle")
        top = max(float(R.max()), 1e-300)
        th = np.concatenate([theta, theta[:1]])
        cmap = matplotlib.colormaps["plasma"]
        for j, r in enumerate(frame_indices(len(t), 4)):
            rad = 1 + np.concatenate([R[r], R[r, :1]]) / top
            axc.plot(rad * np.cos(th), rad * np.sin(th), color=cmap(j / 4),
                     label=f"$t = {t[r]:.3g}$")
        axc.set_aspect("equal")
        axc.set_xlim(-2.1, 2.1)
        axc.set_ylim(-2.1, 2.1)
        axc.set_xlabel("$x_1$")
        axc.set_ylabel("$x_2$")
        axc.set_title(rf"radius $1 + \rho/\max\rho$ ($\max\rho = {top:.3g}$)")
        axc.legend(loc="lower right", fontsize="small")
        _title(fig, f"Density on the circle (path {path_index}, N = {N} cells)", config,
               arrays, attrs)
        return _save(fig, outdir, "density", formats)


# ----------------------------------------------------------------------------- dispatch
_SINGLE = {
    "snapshots": lambda s, o, f, p: plot_snapshots(s, o, f, p),
    "G2": lambda s, o, f, p: plot_G2(s, o, f),
    "ledger": lambda s, o, f, p: plot_ledger(s, o, f, p),
    "balance": lambda s, o, f, p: plot_balance(s, o, f, p),
    "head_scaling": lambda s, o, f, p: plot_head_scaling([s], o, None, f),
    "clustering": lambda s, o, f, p: plot_clustering(s, o, f),
    "density": lambda s, o, f, p: plot_density(s, o, f, p),
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
    if isinstance(src, (str, os.PathLike)):  # read the file once (with its status)
        src = _load_all(src)
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




def _plot_density_s2(config, arrays, attrs, t, R, outdir, formats, path_index):
    """The coloured Voronoi mesh at four record times (front hemisphere of the view)."""
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    from wflow.core.sphere_mesh import voronoi_mesh

    dn = config.get("density", {})
    mesh = voronoi_mesh(R.shape[-1], lloyd=int(dn.get("lloyd", 0)))
    polys = [mesh.vertices[r] for r in mesh.regions]
    norm = matplotlib.colors.Normalize(vmin=0.0, vmax=max(float(R.max()), 1e-300))
    cmap = matplotlib.colormaps["viridis"]
    with matplotlib.rc_context(_STYLE):
        fig = _figure("density", layout="constrained")
        frames = frame_indices(len(t), 4)
        axes = [fig.add_subplot(1, len(frames), j + 1, projection="3d")
                for j in range(len(frames))]
        for ax, r in zip(axes, frames):
            pc = Poly3DCollection(polys, facecolors=cmap(norm(R[r])), edgecolors="none",
                                  linewidths=0)
            ax.add_collection3d(pc)
            ax.view_init(*_VIEW)
            ax.set_box_aspect((1, 1, 1))
            for set_lim in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
                set_lim(-0.8, 0.8)
            ax.set_axis_off()
            ax.set_title(f"$t = {t[r]:.3g}$")
        sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=axes, shrink=0.6, label=r"$\rho$ (cell average, per steradian)")
        _title(fig, f"Density on the sphere (path {path_index}, N = {mesh.N} Voronoi cells)",
               config, arrays, attrs)
        return _save(fig, outdir, "density", formats)
