r"""Shared style, file handling and token geometry of wflow's figures (matplotlib's Agg
canvas, no pyplot): used by :mod:`wflow.figures.plotting` and :mod:`wflow.figures.animation` only.

Every figure is written by :func:`_save`. Inside :func:`figure_context` each figure carries a
mark (e.g. "quick: pipeline check") and each file written is reported to a callback (a
progress bar). With the environment variable ``WFLOW_STRICT_FIGURES=1`` (the test suite sets
it) :func:`_save` refuses a figure that :func:`layout_problems` finds fault with: text cut off
by the canvas, data drawn outside its axes."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import matplotlib  # noqa: F401  (style context for the figure modules)
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import hsv_to_rgb
from matplotlib.figure import Figure

from wflow.analysis.results import SourceError as PlotInputError  # noqa: F401  (re-exported)
from wflow.analysis.results import _cfg, _series, _time  # noqa: F401  (re-exported)
from wflow.analysis.results import load_source as _load  # noqa: F401  (re-exported)
from wflow.storage.files import replacing

log = logging.getLogger("wflow.figures.plotting")

KINDS = ("snapshots", "G2", "ledger", "balance", "head_scaling", "clustering", "density")
#: resolution of PNG output (dots per inch); PNG size in pixels = FIGSIZE[kind] * DPI
DPI = 150
#: fixed figure sizes in inches, per kind
FIGSIZE = {
    "snapshots": (12.8, 3.6),
    "G2": (6.4, 4.0),
    "ledger": (6.4, 7.6),
    "balance": (6.4, 8.0),
    "head_scaling": (5.6, 4.4),
    "clustering": (9.6, 5.6),
    "density": (10.4, 4.4),
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


def _representation(config) -> str:
    """'n = …' for particles, the cells or the degree of a density run [model §5b]."""
    if _cfg(config, "solver", "representation", "particles") != "density":
        return f"n = {_cfg(config, 'model', 'n', '?')}"
    if _cfg(config, "density", "representation", "fv") == "spectral":
        return f"spectral density, degree {_cfg(config, 'density', 'degree', '?')}"
    return f"density, N = {_cfg(config, 'density', 'cells', '?')} cells"


def _describe(config, arrays):
    """A one-line description of the run for figure titles."""
    P = next((np.shape(v)[1] for k, v in arrays.items() if k != "t" and np.ndim(v) >= 2), None)
    parts = [
        f"H = {_cfg(config, 'model', 'heads', '?')}",
        _representation(config),
        f"d = {_cfg(config, 'model', 'd', '?')}",
        *_noise_part(config),
        f"weights: {_cfg(config, 'weights', 'process', '?')}",
        f"normalisation: {_cfg(config, 'model', 'normalization', '?')}",
        f"{_cfg(config, 'model', 'sign', 'descent')}",
    ]
    if P is not None:
        parts.append(f"{P} path{'s' if P != 1 else ''}")
    return ", ".join(parts)


def _noise_part(config) -> list[str]:
    """``["ν = 0.5"]`` for a run with token noise (or a density's diffusion) [model §6b, §5b],
    else nothing."""
    nu = _cfg(config, "model", "diffusion", 0.0)
    try:
        nu = float(nu)
    except (TypeError, ValueError):
        return []
    return [f"ν = {nu:g}"] if nu > 0 else []


def _path(a, p, kind):
    if not 0 <= p < a.shape[1]:
        raise PlotInputError(
            f"{kind}: path_index = {p} out of range (the run has {a.shape[1]} paths)"
        )
    return a[:, p]


_CONTEXT = {"mark": None, "on_save": None}


@contextlib.contextmanager
def figure_context(mark=None, on_save=None):
    """Within the block, every figure :func:`_save` writes carries ``mark`` (a short red note
    at its top, e.g. ``"quick: pipeline check, not the published setting"``, and the same
    text in the file's description metadata) and every file written is passed to
    ``on_save(path)``."""
    old = dict(_CONTEXT)
    _CONTEXT.update(mark=mark, on_save=on_save)
    try:
        yield
    finally:
        _CONTEXT.update(old)


def layout_problems(fig, tol_px=1.0) -> list[str]:
    """What a reader would miss in ``fig``: the figure's tight bounding box (every title,
    label, legend and tick label) reaching past the canvas, and data of a 2-D axes (lines,
    error bars, scatter points) drawn outside the axes, where it is clipped away.

    Returns one string per problem (empty: none). Data at non-finite coordinates is ignored;
    ``tol_px`` pixels of slack absorb round-off of the layout."""
    import matplotlib.collections as mcoll
    import matplotlib.lines as mlines

    canvas = FigureCanvasAgg(fig) if fig.canvas is None or not hasattr(
        fig.canvas, "get_renderer") else fig.canvas
    renderer = canvas.get_renderer()
    fig.draw_without_rendering()
    out = []
    bb = fig.get_tightbbox(renderer)
    w, h = fig.get_size_inches()
    tol = tol_px / fig.dpi
    if bb.x0 < -tol or bb.y0 < -tol or bb.x1 > w + tol or bb.y1 > h + tol:
        out.append(f"text cut off by the canvas: its tight box is [{bb.x0:.2f}, {bb.x1:.2f}] x "
                   f"[{bb.y0:.2f}, {bb.y1:.2f}] in, the canvas [0, {w:.2f}] x [0, {h:.2f}]")
    for ax in fig.axes:
        if getattr(ax, "name", "") != "rectilinear" or not ax.get_visible():
            continue
        box = ax.bbox
        for art in ax.get_children():
            if not art.get_visible() or not art.get_clip_on():
                continue
            if isinstance(art, mlines.Line2D):
                xy = art.get_transform().transform(art.get_xydata())
            elif isinstance(art, mcoll.LineCollection):
                segs = [s for s in art.get_segments() if len(s)]
                if not segs:
                    continue
                xy = art.get_transform().transform(np.concatenate(segs))
            elif isinstance(art, mcoll.PathCollection):
                xy = art.get_offset_transform().transform(art.get_offsets())
            else:
                continue
            xy = xy[np.isfinite(xy).all(axis=1)]
            off = ((xy[:, 0] < box.x0 - tol_px) | (xy[:, 0] > box.x1 + tol_px)
                   | (xy[:, 1] < box.y0 - tol_px) | (xy[:, 1] > box.y1 + tol_px))
            if off.any():
                what = art.get_label() if not art.get_label().startswith("_") else type(
                    art).__name__
                out.append(f"axes {ax.get_title()!r}: {int(off.sum())} point(s) of {what!r} "
                           f"outside the axes")
    return out


def _add_mark(fig, mark, strip=0.2):
    """Write ``mark`` at the top of ``fig``: the first line of its suptitle under a
    constrained layout (which places the suptitle itself), else in red in a strip of
    ``strip`` inches the figure grows by, its own layout keeping its place under it."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    constrained = isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    if constrained and fig._suptitle is not None:
        fig._suptitle.set_text(f"[{mark}]\n{fig._suptitle.get_text()}")
        return
    w, h = fig.get_size_inches()
    f = strip / (h + strip)
    fig.set_size_inches(w, h + strip)
    if constrained:
        fig.get_layout_engine().set(rect=(0.0, 0.0, 1.0, 1.0 - f))
    else:  # the axes and the figure's texts keep their place in inches
        sp = fig.subplotpars
        fig.subplots_adjust(bottom=sp.bottom * (1 - f), top=sp.top * (1 - f))
        for t in [*fig.texts, *([fig._suptitle] if fig._suptitle is not None else [])]:
            t.set_y(t.get_position()[1] * (1 - f))
    fig.text(0.005, 1 - 0.2 * f, mark, color=_C["red"], fontsize=7, ha="left", va="top")


def _save(fig, outdir, kind, formats, dpi=None):
    """Write ``outdir/<kind>.<fmt>`` for each format (creating ``outdir``); the paths. Each
    file is written under a temporary name and renamed when complete
    (:func:`wflow.storage.files.replacing`)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    if _CONTEXT["mark"]:
        _add_mark(fig, _CONTEXT["mark"])
    if os.environ.get("WFLOW_STRICT_FIGURES") == "1":
        problems = layout_problems(fig)
        if problems:
            raise AssertionError(f"figure {outdir / kind}: " + "; ".join(problems))
    out = []
    for fmt in formats:
        p = outdir / f"{kind}.{fmt}"
        with replacing(p) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI if dpi is None else dpi,
                        metadata=_mark_metadata(fmt, _CONTEXT["mark"]))
        out.append(p)
        if _CONTEXT["on_save"] is not None:
            _CONTEXT["on_save"](p)
    return out


#: the metadata field of each format that carries the mark (PNG text chunk, PDF info, SVG)
_MARK_FIELD = {"png": "Description", "pdf": "Subject", "svg": "Description"}


def _mark_metadata(fmt, mark):
    """The file's metadata when marked: the mark in the format's description field, so a
    program reading the file (not only a person looking at it) sees a quick figure."""
    return {_MARK_FIELD[fmt]: mark} if mark else None


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


