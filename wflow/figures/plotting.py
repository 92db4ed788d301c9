r"""Publication figures and token animations for wflow runs [model §8–10].

The figures are drawn by family (:mod:`~wflow.figures.tokens`: snapshots, density;
:mod:`~wflow.figures.series`: G2, ledger, balance, clustering; :mod:`~wflow.figures.scaling`:
head_scaling; :mod:`~wflow.figures.animation`); this module gathers them and dispatches
``plot``. Like every module of :mod:`wflow.figures` (the only matplotlib users) they use
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

from wflow.analysis.results import fit_power_law, head_scaling_data
from wflow.figures._figbase import (  # noqa: F401  (the public constants, re-exported)
    ANIMATION_DPI,
    ANIMATION_FIGSIZE,
    DPI,
    FIGSIZE,
    KINDS,
    PlotInputError,
    _check_formats,
    log,
)
from wflow.figures._source import _load_all
from wflow.figures.animation import animate, frame_indices, plot_orders, plot_table_bars  # noqa: F401
from wflow.figures.scaling import plot_head_scaling
from wflow.figures.series import plot_balance, plot_clustering, plot_G2, plot_ledger
from wflow.figures.tokens import plot_density, plot_snapshots

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
