r"""Figures of a run's recorded series: ``G2``, ``ledger``, ``balance`` and ``clustering``;
see :mod:`wflow.figures.plotting`."""

from __future__ import annotations

import matplotlib
import numpy as np

from wflow.figures import _figbase
from wflow.figures._figbase import (
    _C,
    _STYLE,
    PlotInputError,
    _band,
    _cfg,
    _figure,
    _path,
    _series,
    _sigma,
)
from wflow.figures._source import _inputs, _source_doc, _title


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
    data, missing = [], []
    for k, lab, c in curves:  # a series NaN where it is not defined is left out, and why
        Y = np.asarray(arrays[k], dtype=float) if k in arrays else None
        if Y is not None and np.any(np.isfinite(Y)):
            data.append((Y[:, None] if Y.ndim == 1 else Y, lab, c))
        else:
            missing.append(f"{_PLAIN[k]}: {_why_missing(k, config, arrays)}")
    if not data:
        raise PlotInputError("G2: " + "; ".join(missing))
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
        if missing:
            fig.text(0.01, 0.005, "not drawn: " + "; ".join(missing), fontsize=7,
                     color=_C["grey"], ha="left", va="bottom", wrap=True)
        _title(fig, "Squared metric speeds and dissipation", config, arrays, attrs)
        return _figbase._save(fig, outdir, "G2", formats)


_PLAIN = {"G2": "G²", "G2_hm": "G²_hm", "dissipation": "the dissipation"}


def _why_missing(name, config, arrays) -> str:
    """Why series ``name`` of a G² figure holds no value [model §1b, §4]."""
    causal = _cfg(config, "model", "mask") == "causal"
    general = _cfg(config, "model", "interaction") == "general"
    if name in ("G2", "G2_hm") and causal:
        return "not defined under the causal mask (no mobility, model §1b)"
    if name == "dissipation" and (general or causal):
        return ("no energy for general D_h (model §1b)" if general
                else "no energy under the causal mask (model §2)")
    return "all NaN" if name in arrays else "not recorded"


_LEDGER_HINT = " (diagnostics.ledger = false or causal mask: the exact ledger is not computed)"


def plot_ledger(src, outdir=".", formats=("png", "pdf"), path_index=0):
    r"""The exact energy ledger of [model §6] for one path, in three panels sharing t.

    (a) :math:`\Delta E = E(t) - E(0)` against weight part + token part (telescoping);
    (b) token part against :math:`\sigma\int_0^t\mathcal D\,ds` with the ledger residual
    :math:`R` on the right axis — with token noise (:math:`\nu > 0`, [model §6b]) also its two
    parts :math:`R = M_{\text{tok}} + I_{\text{tok}}`, the token martingale and the realised
    token Itô term (``token_martingale``, ``token_ito_realised``); (c) the weight part split
    into drift, martingale and realised Itô term.

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
        noisy = all(n in arrays for n in ("token_martingale", "token_ito_realised"))
        if noisy:  # R = M_tok + I_tok [model §6b]: noise, not the integrator's error
            br.plot(t, _path(np.asarray(arrays["token_martingale"]), path_index, k),
                    color=_C["green"], lw=0.9, ls="--", label="token martingale $M$ (right)")
            br.plot(t, _path(np.asarray(arrays["token_ito_realised"]), path_index, k),
                    color=_C["orange"], lw=0.9, ls=":", label="token Itô, realised $I$ (right)")
        br.set_ylabel("$R$", color=_C["purple"])
        br.tick_params(axis="y", colors=_C["purple"])
        br.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        h1, l1 = b.get_legend_handles_labels()
        h2, l2 = br.get_legend_handles_labels()
        b.legend(h1 + h2, l1 + l2, loc="best")
        b.set_title("(b) token part vs. chain rule $\\sigma\\int\\mathcal{D}$"
                    + (": token noise, $R = M + I$" if noisy else ""), loc="left")
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
        return _figbase._save(fig, outdir, "ledger", formats)


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
        return _figbase._save(fig, outdir, "balance", formats)


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
        return _figbase._save(fig, outdir, "clustering", formats)
