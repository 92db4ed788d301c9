r"""Token animations (GIF with Pillow, MP4 with ffmpeg) and the summary figures of studies
(ledger orders, bar tables). Re-exported by :mod:`wflow.figures.plotting`."""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from wflow.figures._figbase import (  # noqa: F401
    _C,
    _STYLE,
    ANIMATION_DPI,
    ANIMATION_FIGSIZE,
    DPI,
    PlotInputError,
    _cfg,
    _check_formats,
    _circle_axes,
    _display_coords,
    _figure,
    _load,
    _save,
    _scatter_circle,
    _scatter_sphere,
    _sphere_axes,
    _time,
    _token_colours,
    _tokens,
    log,
)
from wflow.storage.files import replacing


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


def ffmpeg_exe():
    """The ffmpeg executable: the one ``imageio-ffmpeg`` bundles (a dependency of wflow), else
    one on PATH; None when there is neither."""
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        return shutil.which("ffmpeg")


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
        ``*.gif`` (Pillow) or ``*.mp4`` (H.264 by the ffmpeg that ``imageio-ffmpeg`` bundles,
        a dependency; else an ``ffmpeg`` on PATH).
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
        ffmpeg = ffmpeg_exe()
        if ffmpeg is None:
            raise PlotInputError(f"animate: {str(out)!r} needs ffmpeg (pip install imageio-ffmpeg, "
                                 "or an ffmpeg on PATH; neither found); write a .gif instead")
        writer = FFMpegWriter(fps=fps, codec="libx264", extra_args=["-pix_fmt", "yuv420p"])
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
    rc = dict(_STYLE)
    if ext == ".mp4":
        rc["animation.ffmpeg_path"] = ffmpeg
    with matplotlib.rc_context(rc):
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
        with replacing(out) as tmp, writer.saving(fig, str(tmp), dpi=ANIMATION_DPI):
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

