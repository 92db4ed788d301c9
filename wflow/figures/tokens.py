r"""Figures of the tokens of one run: ``snapshots`` (positions at four record times) and
``density`` (a density run's cell averages on the circle or the sphere); see
:mod:`wflow.figures.plotting`."""

from __future__ import annotations

import matplotlib
import numpy as np

from wflow.figures import _figbase
from wflow.figures._figbase import (
    _C,
    _STYLE,
    _VIEW,
    PlotInputError,
    _check_formats,
    _circle_axes,
    _display_coords,
    _figure,
    _scatter_circle,
    _scatter_sphere,
    _sphere_axes,
    _time,
    _token_colours,
    _tokens,
)
from wflow.figures._source import _inputs, _load_all, _title
from wflow.figures.animation import frame_indices


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
        return _figbase._save(fig, outdir, "snapshots", formats)


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
    dn = config.get("density", {})
    spectral = dn.get("representation", "fv") == "spectral"  # values at the nodes [model §5b]
    if int(config.get("model", {}).get("d", 2)) == 3:
        if spectral:
            return _plot_density_s2_grid(config, arrays, attrs, t, R, outdir, formats, path_index)
        return _plot_density_s2(config, arrays, attrs, t, R, outdir, formats, path_index)
    what = "value at the nodes" if spectral else "cell average"
    theta = 2 * np.pi * (np.arange(N) + (0.0 if spectral else 0.5)) / N
    with matplotlib.rc_context(_STYLE):
        fig = _figure("density", layout="constrained")
        ax, axc = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
        edges_t = np.concatenate([t, [t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0)]])
        im = ax.pcolormesh(edges_t, theta[0] - np.pi / N + 2 * np.pi * np.arange(N + 1) / N, R.T,
                           cmap="viridis", shading="flat", rasterized=True)
        fig.colorbar(im, ax=ax, label=rf"$\rho$ ({what}, per radian)")
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
        grid = (f"Fourier degree K = {dn.get('degree')}, N = {N} nodes" if spectral
                else f"N = {N} cells")
        _title(fig, f"Density on the circle (path {path_index}, {grid})", config, arrays, attrs)
        return _figbase._save(fig, outdir, "density", formats)


def _sphere_frames(config, arrays, attrs, t, R, outdir, formats, draw, vmin, label, title):
    """The density on the sphere at four record times (front hemisphere of the view):
    ``draw(ax, colours, r)`` paints record ``r`` with the face colours of its values."""
    norm = matplotlib.colors.Normalize(vmin=vmin, vmax=max(float(R.max()), 1e-300))
    cmap = matplotlib.colormaps["viridis"]
    with matplotlib.rc_context(_STYLE):
        fig = _figure("density", layout="constrained")
        frames = frame_indices(len(t), 4)
        axes = [fig.add_subplot(1, len(frames), j + 1, projection="3d")
                for j in range(len(frames))]
        for ax, r in zip(axes, frames):
            draw(ax, cmap(norm(R[r])), r)
            ax.view_init(*_VIEW)
            ax.set_box_aspect((1, 1, 1))
            for set_lim in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
                set_lim(-0.8, 0.8)
            ax.set_axis_off()
            ax.set_title(f"$t = {t[r]:.3g}$")
        sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=axes, shrink=0.6, label=label)
        _title(fig, title, config, arrays, attrs)
        return _figbase._save(fig, outdir, "density", formats)


def _plot_density_s2_grid(config, arrays, attrs, t, R, outdir, formats, path_index):
    """The spectral representation's nodal values on its Gauss–Legendre grid [model §5b], as
    quadrilaterals around the nodes (edges halfway between nodes; the poles close the caps)."""
    from wflow.geometry.harmonics import harmonics

    grid = harmonics(3, int(config.get("density", {}).get("degree", 0)))
    if grid.N != R.shape[-1]:
        raise PlotInputError(f"density: 'rho' has {R.shape[-1]} values, the grid of "
                             f"density.degree = {grid.degree} has {grid.N} nodes")
    nt, nph = grid.shape
    C = grid.centres.reshape(nt, nph, 3)
    th = np.arccos(np.clip(C[:, 0, 2], -1.0, 1.0))
    ph = np.arctan2(C[0, :, 1], C[0, :, 0])
    te = np.concatenate([[0.0], (th[1:] + th[:-1]) / 2, [np.pi]])
    pe = np.concatenate([ph - np.pi / nph, [ph[-1] + np.pi / nph]])
    xs = np.outer(np.sin(te), np.cos(pe))
    ys = np.outer(np.sin(te), np.sin(pe))
    zs = np.outer(np.cos(te), np.ones_like(pe))

    def draw(ax, colours, r):
        ax.plot_surface(xs, ys, zs, facecolors=colours.reshape(nt, nph, -1), rstride=1,
                        cstride=1, linewidth=0, antialiased=False, shade=False)

    return _sphere_frames(config, arrays, attrs, t, R, outdir, formats, draw,
                          min(0.0, float(R.min())), r"$\rho$ (value at the nodes, per steradian)",
                          f"Density on the sphere (path {path_index}, degree L = {grid.degree}, "
                          f"{nt} × {nph} Gauss–Legendre nodes)")


def _plot_density_s2(config, arrays, attrs, t, R, outdir, formats, path_index):
    """The coloured Voronoi mesh at four record times (front hemisphere of the view)."""
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    from wflow.geometry.sphere_mesh import voronoi_mesh

    dn = config.get("density", {})
    mesh = voronoi_mesh(R.shape[-1], lloyd=int(dn.get("lloyd", 0)))
    polys = [mesh.vertices[r] for r in mesh.regions]

    def draw(ax, colours, r):
        ax.add_collection3d(Poly3DCollection(polys, facecolors=colours, edgecolors="none",
                                             linewidths=0))

    return _sphere_frames(config, arrays, attrs, t, R, outdir, formats, draw, 0.0,
                          r"$\rho$ (cell average, per steradian)",
                          f"Density on the sphere (path {path_index}, N = {mesh.N} Voronoi cells)")
