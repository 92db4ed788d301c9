r"""Publication figures and token animations for wflow runs [model §8–10].

This is the only wflow module that imports matplotlib. It uses
:class:`matplotlib.figure.Figure` directly with the Agg canvas (no pyplot, no
global backend switch), so it runs headless; style settings are applied with
:func:`matplotlib.rc_context` and restored afterwards.

Every function takes a *source*: a path to an HDF5 result file (read with
:func:`wflow.io.read`, imported lazily), a :class:`wflow.run.Result`, or an
in-memory pair ``(config, arrays)`` (a triple ``(config, arrays, attrs)`` as
returned by :func:`wflow.io.read` is accepted too).

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

import logging
import os
import shutil
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import hsv_to_rgb
from matplotlib.figure import Figure

from .analysis import SourceError as PlotInputError
from .analysis import _cfg, _series, _time, fit_power_law, head_scaling_data
from .analysis import load_source as _load

log = logging.getLogger(__name__)

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
KINDS = ("snapshots", "G2", "ledger", "balance", "head_scaling", "clustering")
#: resolution of PNG output (dots per inch); PNG size in pixels = FIGSIZE[kind] * DPI
DPI = 150
#: fixed figure sizes in inches, per kind
FIGSIZE = {
    "snapshots": (12.8, 3.6),
    "G2": (6.4, 4.0),
    "ledger": (6.4, 7.6),
    "balance": (6.4, 6.4),
    "head_scaling": (5.6, 4.4),
    "clustering": (9.6, 5.6),
}
#: animation frame size (inches) and resolution
ANIMATION_FIGSIZE = (4.8, 4.8)
ANIMATION_DPI = 100
FORMATS = ("png", "pdf", "svg")

_STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.4,
    "legend.frameon": True,
    "legend.framealpha": 0.85,
    "legend.edgecolor": "0.85",
    "legend.fancybox": False,
    "savefig.dpi": DPI,
    "pdf.fonttype": 42,
}
_C = {  # colour-blind-safe palette (Okabe–Ito)
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "red": "#D55E00", "purple": "#CC79A7",
    "grey": "#777777",
}
_VIEW = (22.0, 35.0)  # (elevation, azimuth) of the 3D camera, degrees


# ----------------------------------------------------------------------------- loading
def _sigma(config):
    return 1.0 if _cfg(config, "model", "sign", "descent") == "ascent" else -1.0


def _describe(config, arrays):
    """A one-line description of the run for figure titles."""
    P = next((np.shape(v)[1] for k, v in arrays.items() if k != "t" and np.ndim(v) >= 2), None)
    parts = [
        f"H = {_cfg(config, 'model', 'heads', '?')}",
        f"n = {_cfg(config, 'model', 'n', '?')}",
        f"d = {_cfg(config, 'model', 'd', '?')}",
        f"weights: {_cfg(config, 'weights', 'process', '?')}",
        f"normalisation: {_cfg(config, 'model', 'normalization', '?')}",
        f"{_cfg(config, 'model', 'sign', 'descent')}",
    ]
    if P is not None:
        parts.append(f"{P} path{'s' if P != 1 else ''}")
    return ", ".join(parts)


def _path(a, p, kind):
    if not 0 <= p < a.shape[1]:
        raise PlotInputError(
            f"{kind}: path_index = {p} out of range (the run has {a.shape[1]} paths)"
        )
    return a[:, p]


def _save(fig, outdir, kind, formats):
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    out = []
    for fmt in formats:
        p = outdir / f"{kind}.{fmt}"
        fig.savefig(p, format=fmt, dpi=DPI)
        out.append(p)
    return out


def _check_formats(formats):
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise PlotInputError(f"formats = {formats!r}: allowed values are {', '.join(FORMATS)}")
    return formats


def _figure(kind, **kw):
    return Figure(figsize=FIGSIZE[kind], dpi=DPI, **kw)


def _band(ax, t, Y, color, label, positive=False):
    """Mean over paths (columns of Y) with a min–max band; returns the line."""
    Y = np.array(Y, dtype=float)
    if positive:
        Y[Y <= 0] = np.nan
    with np.errstate(all="ignore"), _quiet_nanwarnings():
        mean = np.nanmean(Y, axis=1)
        lo, hi = np.nanmin(Y, axis=1), np.nanmax(Y, axis=1)
    (line,) = ax.plot(t, mean, color=color, label=label)
    if Y.shape[1] > 1:
        ax.fill_between(t, lo, hi, color=color, alpha=0.2, linewidth=0)
    return line


class _quiet_nanwarnings:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


# ----------------------------------------------------------------------------- geometry
def _tokens(arrays, kind, path_index):
    """Token snapshots of one path, (records, n, d); PlotInputError when not stored."""
    if "X" not in arrays or arrays["X"] is None:
        raise PlotInputError(
            f"{kind}: no token snapshots 'X' in the source (set output.store_tokens = true)"
        )
    X = np.asarray(arrays["X"], dtype=float)
    if X.ndim != 4 or X.shape[-1] < 2:
        raise PlotInputError(
            f"{kind}: 'X' must have shape (records, P, n, d) with d >= 2, got {X.shape}"
        )
    if not 0 <= path_index < X.shape[1]:
        raise PlotInputError(
            f"{kind}: path_index = {path_index} out of range (the run has {X.shape[1]} paths)"
        )
    return X[:, path_index]


def _display_coords(X):
    """Coordinates to draw, (records, n, k) with k = 2 or 3, and a note for titles.

    d = 2, 3: the tokens themselves. d > 3: the first three principal coordinates
    (uncentred, so the origin stays the sphere's centre; one basis for all records),
    renormalised onto S².
    """
    d = X.shape[-1]
    if d <= 3:
        return X, ""
    flat = X.reshape(-1, d)
    _, _, Vt = np.linalg.svd(flat, full_matrices=False)
    Y = X @ Vt[:3].T
    nrm = np.linalg.norm(Y, axis=-1, keepdims=True)
    Y = Y / np.where(nrm > 0, nrm, 1.0)
    return Y, f"first 3 principal coordinates of $S^{{{d - 1}}}$, normalised"


def _token_colours(Y0):
    """One colour per token from its initial position (hue = azimuth, value = height)."""
    hue = (np.arctan2(Y0[:, 1], Y0[:, 0]) / (2 * np.pi)) % 1.0
    z = Y0[:, 2] if Y0.shape[1] > 2 else np.zeros(len(Y0))
    hsv = np.stack([hue, np.full_like(hue, 0.85), 0.45 + 0.4 * (z + 1) / 2], axis=1)
    return hsv_to_rgb(hsv)


def _camera(elev, azim):
    e, a = np.deg2rad(elev), np.deg2rad(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def _sphere_axes(ax, shade=True):
    """A light unit sphere (shaded, or flat for GIF palettes) with an equator, no axes box."""
    u = np.linspace(0, 2 * np.pi, 48)
    v = np.linspace(0, np.pi, 24)
    xs = np.outer(np.cos(u), np.sin(v))
    ys = np.outer(np.sin(u), np.sin(v))
    zs = np.outer(np.ones_like(u), np.cos(v))
    ax.computed_zorder = False
    ax.plot_surface(xs, ys, zs, color="#c9d6e8", alpha=0.28, linewidth=0, shade=shade,
                    antialiased=True, zorder=2, rstride=1, cstride=1)
    ax.plot(np.cos(u), np.sin(u), 0 * u, color=_C["grey"], lw=0.5, alpha=0.6, zorder=2)
    ax.view_init(*_VIEW)
    ax.set_box_aspect((1, 1, 1))
    lim = 0.78
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(-lim, lim)
    ax.set_axis_off()


def _scatter_sphere(ax, Y, colours, size=12):
    """Tokens on the sphere: the far hemisphere faint behind the surface, the near one on top."""
    front = Y @ _camera(*_VIEW) >= 0
    arts = []
    for mask, alpha, z, s in ((~front, 0.3, 1, 0.6 * size), (front, 1.0, 3, size)):
        if np.any(mask):
            arts.append(ax.scatter(Y[mask, 0], Y[mask, 1], Y[mask, 2], c=colours[mask], s=s,
                                   alpha=alpha, depthshade=False, linewidths=0.3,
                                   edgecolors="k" if alpha == 1.0 else "none", zorder=z))
    return arts


def _circle_axes(ax):
    u = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(u), np.sin(u), color="#9fb3cf", lw=1.2, zorder=1)
    ax.set_aspect("equal")
    ax.set_xlim(-1.2, 1.2)
    ax.set_ylim(-1.2, 1.2)
    ax.set_axis_off()


def _scatter_circle(ax, Y, colours, size=14):
    return [ax.scatter(Y[:, 0], Y[:, 1], c=colours, s=size, linewidths=0.3, edgecolors="k",
                       zorder=3)]


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


def plot_G2(src, outdir=".", formats=("png", "pdf")):
    r"""Squared metric speeds and dissipation over time on a log axis.

    Draws :math:`G^2` (arithmetic-mean mobility, the reference simulation's),
    :math:`G^2_{hm}` (harmonic-mean mobility :math:`\hat b`) and :math:`\mathcal D`:
    the mean over paths with a min–max band. Non-positive values are not drawn.

    Parameters
    ----------
    src : path, Result or (config, arrays)
    outdir : path-like
    formats : sequence of str

    Returns
    -------
    list of Path
    """
    formats = _check_formats(formats)
    config, arrays = _load(src)
    t = _time(arrays)
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
    formats = _check_formats(formats)
    config, arrays = _load(src)
    t = _time(arrays)
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
    formats = _check_formats(formats)
    config, arrays = _load(src)
    t = _time(arrays)
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


def plot_clustering(src, outdir=".", formats=("png", "pdf")):
    """Clustering diagnostics of [model §8] over time, as small multiples.

    Each panel: mean over paths with a min–max band. Series absent from the source
    are left out; if none is present a :class:`PlotInputError` is raised.

    Parameters
    ----------
    src : path, Result or (config, arrays)
    outdir : path-like
    formats : sequence of str

    Returns
    -------
    list of Path
    """
    formats = _check_formats(formats)
    config, arrays = _load(src)
    t = _time(arrays)
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
            H, mean, ci = dat["H"], dat["mean"], dat["ci"]
            pre = f"{label}: " if label is not None else ""
            yerr = np.where(np.isfinite(ci), np.minimum(ci, mean * (1 - 1e-9)), 0.0)
            yerr = np.vstack([yerr, np.where(np.isfinite(ci), ci, 0.0)])
            handles.append(ax.errorbar(H, mean, yerr=yerr, fmt="o", color=c, ms=5, capsize=3,
                                       lw=1.0, label=f"{pre}mean $G^2$ over {wtxt}, 95% CI"))
            if H.size >= 2:
                a, b, se = fit_power_law(H, mean)
                hh = np.geomspace(H.min() / 1.3, H.max() * 1.3, 50)
                setxt = "" if not np.isfinite(se) else f" \\pm {se:.2g}"
                handles += ax.plot(hh, a * hh ** b, color=c, ls="--", lw=1.0,
                        label=f"{pre}fit $aH^b$: $a = {a:.3g}$, $b = {b:.3f}{setxt}$")
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
        An HDF5 result file, a :class:`wflow.run.Result` or ``(config, arrays)``.
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


# ----------------------------------------------------------------------------- animation
def frame_indices(records, max_frames):
    """Indices of ``min(records, max_frames)`` records, evenly spread, first and last included."""
    if records < 1:
        raise PlotInputError("animate: the source has no records")
    if max_frames < 1:
        raise PlotInputError(f"max_frames = {max_frames}: must be at least 1")
    m = min(records, int(max_frames))
    if m == 1:
        return np.array([0])
    return np.round(np.linspace(0, records - 1, m)).astype(int)


def animate(src, out="tokens.gif", fps=15, path_index=0, max_frames=200):
    """Animate the stored token snapshots of one path.

    S² (d = 3) on a shaded sphere, S¹ (d = 2) on a circle, d > 3 on the sphere of the
    first three principal coordinates (normalised). Tokens keep the colour of their
    initial position.

    Parameters
    ----------
    src : path, Result or (config, arrays)
        Needs token snapshots ``X``.
    out : path-like
        ``*.gif`` (Pillow) or ``*.mp4`` (needs ``ffmpeg`` on PATH).
    fps : int
        Frames per second.
    path_index : int
    max_frames : int
        At most this many frames, evenly subsampled from the records: the animation
        has ``min(records, max_frames)`` frames.

    Returns
    -------
    Path
        ``out``.
    """
    from matplotlib.animation import FFMpegWriter, PillowWriter

    out = Path(out)
    ext = out.suffix.lower()
    if ext == ".gif":
        writer = PillowWriter(fps=fps)
    elif ext == ".mp4":
        if shutil.which("ffmpeg") is None:
            raise PlotInputError(f"animate: {str(out)!r} needs ffmpeg on PATH (not found); "
                                 "write a .gif instead")
        writer = FFMpegWriter(fps=fps)
    else:
        raise PlotInputError(f"animate: out = {str(out)!r}: the file must end in .gif or .mp4")
    config, arrays = _load(src)
    X = _tokens(arrays, "animate", path_index)
    t = _time(arrays)
    Y, note = _display_coords(X)
    frames = frame_indices(len(t), max_frames)
    three = Y.shape[-1] == 3
    colours = _token_colours(Y[0] if three else np.pad(Y[0], ((0, 0), (0, 1))))
    out.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=ANIMATION_FIGSIZE, dpi=ANIMATION_DPI)
        FigureCanvasAgg(fig)
        if three:
            ax = fig.add_subplot(projection="3d")
            # a flat surface leaves the GIF palette to the tokens
            _sphere_axes(ax, shade=ext != ".gif")
            fig.subplots_adjust(left=-0.05, right=1.05, bottom=-0.05, top=0.95)
            draw = _scatter_sphere
        else:
            ax = fig.add_subplot()
            _circle_axes(ax)
            fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.9)
            draw = _scatter_circle
        head = (f"H = {_cfg(config, 'model', 'heads', '?')}, n = {X.shape[1]}, "
                f"path {path_index}" + (f"\n{note}" if note else ""))
        title = fig.suptitle("")
        arts = []
        with writer.saving(fig, str(out), dpi=ANIMATION_DPI):
            for r in frames:
                for a in arts:
                    a.remove()
                arts = draw(ax, Y[r], colours)
                title.set_text(f"$t = {t[r]:.3f}$   ({head})")
                writer.grab_frame()
    return out


# ----------------------------------------------------------------------------- study summaries
#: sizes (inches) of the study summary figures
SUMMARY_FIGSIZE = {"orders": (5.6, 4.4), "table": (8.0, 5.2)}


def plot_orders(table, outdir=".", formats=("png", "pdf"), x="dt", y="ledger_residual",
                group="method"):
    r"""Log–log plot of an error against the step, one line per group, with the fitted order.

    For each group g the fit is :math:`\log|e| = p_g \log\Delta t + c_g` (least squares),
    drawn dashed and named with its order :math:`p_g` (the ``energy`` study: the exact
    ledger residual :math:`|R(T)|` against :math:`\Delta t` per solver).

    Parameters
    ----------
    table : dict
        Column table (column → list of equal length) with columns ``x``, ``y`` and ``group``.
    outdir : path-like
    formats : sequence of str
    x, y, group : str
        Column names.

    Returns
    -------
    list of Path
        ``orders.<fmt>``.
    """
    formats = _check_formats(formats)
    X = np.asarray(table[x], dtype=float)
    Y = np.abs(np.asarray(table[y], dtype=float))
    G = np.asarray(table[group]).astype(str)
    colours = [_C["blue"], _C["red"], _C["green"], _C["orange"], _C["purple"], _C["sky"]]
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=SUMMARY_FIGSIZE["orders"], dpi=DPI, layout="constrained")
        ax = fig.add_subplot()
        for j, g in enumerate(dict.fromkeys(G)):
            c = colours[j % len(colours)]
            sel = (G == g) & (X > 0) & (Y > 0)
            xs, ys = X[sel], Y[sel]
            ax.plot(xs, ys, "o", color=c, ms=5)
            if xs.size >= 2:
                p, c0 = np.polyfit(np.log(xs), np.log(ys), 1)
                xx = np.geomspace(xs.min(), xs.max(), 20)
                ax.plot(xx, np.exp(c0) * xx ** p, "--", color=c, lw=1.0,
                        label=f"{g}: order {p:.2f}")
            else:
                ax.plot([], [], "o", color=c, label=str(g))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"step $\Delta t$" if x == "dt" else x)
        ax.set_ylabel(r"ledger residual $|R(T)|$" if y == "ledger_residual" else y)
        ax.set_title("Fitted orders (least squares on log–log axes)")
        ax.legend(loc="best")
        return _save(fig, outdir, "orders", formats)


def plot_table_bars(table, outdir=".", label="run", formats=("png", "pdf")):
    """Grouped bars of a study's summary table: one panel per numeric column, one bar per row.

    Parameters
    ----------
    table : dict
        Column table (column → list of equal length); ``label`` names the rows.
    outdir : path-like
    label : str
        The column of row names.
    formats : sequence of str

    Returns
    -------
    list of Path
        ``table.<fmt>``.
    """
    formats = _check_formats(formats)
    names = [str(v) for v in table[label]]
    cols = [k for k in table if k != label]
    if not names or not cols:
        raise PlotInputError("table: nothing to draw (no rows or no numeric columns)")
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=SUMMARY_FIGSIZE["table"], dpi=DPI, layout="constrained")
        ncol = min(3, len(cols))
        nrow = -(-len(cols) // ncol)
        colours = [_C["blue"], _C["red"], _C["green"], _C["orange"], _C["purple"], _C["sky"]]
        handles = None
        for i, k in enumerate(cols):
            ax = fig.add_subplot(nrow, ncol, i + 1)
            vals = np.asarray(table[k], dtype=float)
            bars = ax.bar(range(len(names)), vals, color=[colours[j % len(colours)]
                                                          for j in range(len(names))])
            handles = handles or list(bars)
            ax.set_title(k)
            ax.set_xticks([])
            ax.grid(axis="x", visible=False)
        fig.legend(handles, names, loc="outside lower center", ncols=min(3, len(names)))
        fig.suptitle("Final record, mean over paths")
        return _save(fig, outdir, "table", formats)
