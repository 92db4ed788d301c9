r"""Particles against the spectral density: the mean-field limit on :math:`S^1` and :math:`S^2`.

The same initial law :math:`\rho_0` is moved (i) as a band-limited density by the spectral
solver [model §5b, "The spectral representation"] at degree L and 2L (the 2L solution is the
reference :math:`\rho(t)`, the L–2L difference its error estimate), and (ii) as n i.i.d.
particles, P independent samples per n (``init.per_path_tokens``; each n takes its own
Monte Carlo paths through ``init.first_path``, so no two samples share a draw), their field
by the spectral summation [model §2s] (``solver.summation = "spectral"``, full scale).

**The smooth distance.** With :math:`Y_{\ell m}` the orthonormal spherical harmonics
(:math:`e^{ik\theta}/\sqrt{2\pi}` on :math:`S^1`),
:math:`\hat\mu_{\ell m} = \int\overline{Y_{\ell m}}\,d\mu`, and
:math:`\delta_{\ell m} = \hat\mu^n_{\ell m} - \hat\rho_{\ell m}`,

.. math::
    \mathcal D_\Lambda(\mu^n, \rho)^2 = \sum_{1\le\ell\le\Lambda}\ \sum_{|m|\le\ell}
    \lvert\delta_{\ell m}\rvert^2
    = \sup\Big\{\Big|\int f\,d(\mu^n - \rho)\Big|^2 :
      f = \sum_{1\le\ell\le\Lambda} a_{\ell m}Y_{\ell m},\ \sum|a_{\ell m}|^2\le 1\Big\}

(S¹: :math:`1 \le |k| \le \Lambda`), the dual norm of the first harmonics. For i.i.d.
samples :math:`n\,\mathbb E\,\mathcal D_\Lambda^2 = \sum\operatorname{Var}Y_{\ell m}(X)`: the
central limit theorem's :math:`n^{-1/2}`, no logarithm in any dimension. Per degree,
:math:`e_\ell^2 = \sum_m|\delta_{\ell m}|^2`. Near the uniform state the fluctuation obeys the
linearised equation, diagonal in the harmonics: :math:`e_\ell(t) \approx
e^{\sigma\lambda_\ell t}e_\ell(0)` with :math:`\lambda_\ell` the growth rates of [model §6c]
(:func:`wflow.model.uniform_state.derived_rate`, D = V = I), so
:math:`\mathbb E e_\ell^2(t)/\mathbb E e_\ell^2(0) \approx e^{2\sigma\lambda_\ell t}`.

**W₂ on S¹.** The exact circle :math:`W_2` (``ot.wasserstein_circle``) between the particles
and the density synthesised at :data:`W2_NODES` equispaced angles with masses
:math:`\rho(\theta_j)\,2\pi/N` (within :math:`W_\infty \le \pi/N` of :math:`\rho`). Not on
S² (the transport linear program of a 10⁴–10⁶-point sample is beyond this study's budget).

**Fits.** :math:`\overline{\mathcal D}(n) \approx Cn^{a}` (and :math:`\overline{W_2}`) at
each record time, least squares of the log-means on :math:`\log n`, 95% jackknife Student-t
interval over the independent samples of each n
(:func:`wflow.analysis.intervals.power_law_interval`, ``paired=False``).

**Configurations** (:data:`CONFIGS`): a von Mises–Fisher start (κ = 1) and a near-uniform
one, :math:`\rho_0 \propto e^{\kappa\langle e, x\rangle} = \bar\rho(1 + \kappa\langle e,
x\rangle + O(\kappa^2))` with κ = 0.1 (uniform plus a smooth perturbation of relative size
κ; the particle sampler draws von Mises–Fisher laws), D = V = I or a frozen
:math:`D = I + \tfrac12 S` (``init.weight_perturbation``, S a random symmetric matrix of
Frobenius norm 1, the same for both representations), ascent and descent, head
normalisation and none; β = 1, H = 1, RK4 for the particles, SSP-RK3 with CFL substeps for
the density.
"""

from __future__ import annotations

import copy

import numpy as np

from wflow.analysis.intervals import power_law_interval
from wflow.analysis.results import load_source, mean_ci
from wflow.studies._base import Study, register_study
from wflow.sweeps.sweep import expand_grid

__all__ = ["MeanField", "CONFIGS", "circle_angles", "w2_circle", "particle_coefficients",
           "density_coefficients", "fv_coefficients", "smooth_distance", "meanfield_errors",
           "fit_exponent", "fit_table", "growth_table", "meanfield_summary", "W2_NODES"]

MEANFIELD_BASE = {
    "model": {"d": 2, "n": 100, "beta": 1.0, "heads": 1, "normalization": "head",
              "sign": "ascent"},
    "init": {"tokens": "vmf", "kappa": 1.0, "weights": "identity", "seed": 0,
             "per_path_tokens": True},
    "weights": {"process": "frozen"},
    "solver": {"method": "rk4", "dt": 0.25, "T": 1.0, "record_every": 2, "paths": 3},
    "diagnostics": {"ledger": False, "clustering": False},
    "output": {"store_tokens": True},
}

#: name: (κ, weight perturbation ε (D = I + εS), sign, normalisation)
CONFIGS = {
    "vmf": (1.0, 0.0, "ascent", "head"),
    "vmf-D-descent": (1.0, 0.5, "descent", "head"),
    "near-uniform": (0.1, 0.0, "ascent", "none"),
    "near-uniform-descent": (0.1, 0.0, "descent", "head"),
}

#: per scale and sphere: the configurations, the particle counts and samples per n
#: (``seeds_at`` overrides), the configurations run at ``n_top`` too, the density degrees
#: (L, 2L), the degrees of the convergence table (of ``conv_config``), the finite-volume
#: meshes (S¹, of the first configuration), T, the smooth distance's Λ, the summation
GRID = {
    ("quick", 2): {"configs": ("near-uniform",), "n": (100, 300, 1000), "seeds": 6,
                   "n_top": (), "seeds_at": {}, "degree": (16, 32), "conv": (), "cells": (),
                   "T": 0.5, "dt": 0.25, "record_every": 2, "Lambda": 4,
                   "summation": "direct", "w2": False},
    ("quick", 3): {"configs": ("near-uniform",), "n": (100, 300, 1000), "seeds": 6,
                   "n_top": (), "seeds_at": {}, "degree": (8, 16), "conv": (), "cells": (),
                   "T": 0.5, "dt": 0.25, "record_every": 2, "Lambda": 4,
                   "summation": "direct", "w2": False},
    ("full", 2): {"configs": tuple(CONFIGS), "n": (1000, 10000, 100000), "seeds": 6,
                  "n_top": tuple(CONFIGS), "seeds_at": {1000000: 3}, "degree": (32, 64),
                  "conv": (8, 16), "conv_config": "vmf-D-descent", "cells": (512, 1024),
                  "T": 1.0, "dt": 0.25, "record_every": 2, "Lambda": 4,
                  "summation": "auto"},
    ("full", 3): {"configs": tuple(CONFIGS), "n": (100, 1000, 10000, 100000), "seeds": 6,
                  "n_top": tuple(CONFIGS), "seeds_at": {1000000: 3},
                  "degree": (16, 32), "conv": (4, 8), "conv_config": "vmf-D-descent",
                  "cells": (), "T": 1.0, "dt": 0.25, "record_every": 2, "Lambda": 4,
                  "summation": "auto"},
}
#: the n above the grid's, for the configurations ``n_top``
N_TOP = 1000000
#: the density as weighted points for the circle W₂
W2_NODES = 1 << 15


# ---------------------------------------------------------------------------------- W2 on S1
def circle_angles(X) -> np.ndarray:
    r""":math:`\theta = \operatorname{atan2}(x_2, x_1) \bmod 2\pi` of points (..., 2)."""
    X = np.asarray(X, dtype=float)
    return np.mod(np.arctan2(X[..., 1], X[..., 0]), 2 * np.pi)


def w2_circle(theta_u, theta_v, w_u=None, w_v=None):
    r"""The exact quadratic Wasserstein distance on the unit circle (arc-length cost),

    .. math:: W_2(\mu, \nu)^2 = \inf_{\alpha\in\mathbb R}\int_0^1
        \big|F_\mu^{-1}(q) - (F_\nu - \alpha)^{-1}(q)\big|^2\,dq

    in radians, by ``ot.wasserstein_circle`` (p = 2, the binary search of Hundrieser, Klatt
    and Munk, stopped at 1e-9 in the shift α) on the coordinates :math:`\theta/2\pi \in [0, 1)`.

    ``theta_u`` (n,) gives a float; (B, n) gives B distances (B measures against the one
    ``theta_v`` (m,), or against B rows of a (B, m) ``theta_v``) in one batched call.
    """
    from wflow.model.diagnostics import circle_w2_squared

    tu = np.asarray(theta_u, dtype=float)
    tv = np.asarray(theta_v, dtype=float)
    batched = tu.ndim == 2
    if not batched:
        tu = tu[None]
    B = tu.shape[0]
    tv = np.broadcast_to(tv, (B, tv.shape[-1]))

    def weights(w, m):
        if w is None:
            return None
        w = np.broadcast_to(np.asarray(w, dtype=float), (B, m))
        return (w / w.sum(axis=1, keepdims=True)).T.copy()

    u = np.mod(tu / (2 * np.pi), 1.0).T.copy()  # POT: (n, B)
    v = np.mod(tv / (2 * np.pi), 1.0).T.copy()
    loss = circle_w2_squared(u, v, weights(w_u, tu.shape[1]), weights(w_v, tv.shape[1]))
    d = 2 * np.pi * np.sqrt(np.maximum(loss.reshape(B), 0.0))
    return d if batched else float(d[0])


# ---------------------------------------------------------------------------------- coefficients
def particle_coefficients(X, Lam) -> np.ndarray:
    r"""The harmonic coefficients :math:`\hat\mu_{\ell m} = \frac1n\sum_i
    \overline{Y_{\ell m}(x_i)}` of the empirical measure of points X (..., n, d), degree
    :math:`\le\Lambda`: S¹ (d = 2) :math:`\frac{1}{n\sqrt{2\pi}}\sum_i e^{-ik\theta_i}`, k =
    0..Λ, (..., Λ+1); S² (d = 3) :math:`Y_{\ell m} = \Lambda_{\ell m}(\theta)e^{im\varphi}`
    (orthonormal, Condon–Shortley, :func:`wflow.kernels.spectral._legendre`), m ≥ 0,
    (..., Λ+1, Λ+1) indexed [ℓ, m], zero for m > ℓ."""
    X = np.asarray(X, dtype=float)
    d = X.shape[-1]
    if d == 2:
        th = circle_angles(X)
        k = np.arange(Lam + 1)
        return np.stack([np.mean(np.exp(-1j * kk * th), axis=-1) for kk in k],
                        axis=-1) / np.sqrt(2 * np.pi)
    from wflow.kernels.spectral import _legendre

    lead = X.shape[:-2]
    n = X.shape[-2]
    Xf = X.reshape(-1, n, 3)
    out = np.zeros((Xf.shape[0], Lam + 1, Lam + 1), dtype=complex)
    for b in range(Xf.shape[0]):
        z = np.clip(Xf[b, :, 2], -1.0, 1.0)
        s = np.hypot(Xf[b, :, 0], Xf[b, :, 1])
        phi = np.arctan2(Xf[b, :, 1], Xf[b, :, 0])
        lam = _legendre(Lam, z, s)
        for m in range(Lam + 1):
            e = np.exp(-1j * m * phi)
            for ll in range(m, Lam + 1):
                out[b, ll, m] = np.mean(lam[m][ll - m] * e)
    return out.reshape(lead + (Lam + 1, Lam + 1))


def density_coefficients(rho, grid, Lam) -> np.ndarray:
    r"""The same coefficients :math:`\hat\rho_{\ell m} = \int\overline{Y_{\ell m}}\rho` of
    nodal values ``rho`` (..., G) of the spectral representation on ``grid``
    (:mod:`wflow.geometry.harmonics`): S¹ :math:`\sqrt{2\pi}` times the grid's analysis, S²
    the analysis itself (exact for the band-limited ρ)."""
    c = grid.analysis(rho)
    if grid.d == 2:
        return c[..., : Lam + 1] * np.sqrt(2 * np.pi)
    return c[..., : Lam + 1, : Lam + 1]


def fv_coefficients(rho, Lam) -> np.ndarray:
    r"""The circle coefficients of the piecewise-constant density of cell averages ``rho``
    (..., N) on the cells :math:`[jh, (j+1)h)`:
    :math:`\frac{1}{\sqrt{2\pi}}\sum_j\rho_j\int_{jh}^{(j+1)h}e^{-ik\theta}d\theta =
    \frac{h}{\sqrt{2\pi}}\operatorname{sinc}(kh/2)\sum_j\rho_je^{-ik(j+1/2)h}`."""
    rho = np.asarray(rho, dtype=float)
    N = rho.shape[-1]
    h = 2 * np.pi / N
    k = np.arange(Lam + 1)
    c = np.fft.fft(rho, axis=-1)[..., : Lam + 1]
    return c * np.exp(-0.5j * k * h) * h * np.sinc(k * h / (2 * np.pi)) / np.sqrt(2 * np.pi)


def degree_errors(a, b, d) -> np.ndarray:
    r""":math:`e_\ell^2 = \sum_{|m|\le\ell}|a_{\ell m} - b_{\ell m}|^2`, ℓ = 0..Λ (..., Λ+1)
    (m < 0 the conjugates of a real measure's: twice the m > 0 terms; S¹: 2|δ_k|², k ≥ 1)."""
    diff = np.abs(np.asarray(a) - np.asarray(b)) ** 2
    if d == 2:
        out = 2 * diff
        out[..., 0] = diff[..., 0]
        return out
    return diff[..., 0] + 2 * diff[..., 1:].sum(axis=-1)


def smooth_distance(a, b, d) -> np.ndarray:
    r""":math:`\mathcal D_\Lambda = (\sum_{\ell=1}^{\Lambda}e_\ell^2)^{1/2}` of two coefficient
    arrays (:func:`degree_errors`; the mass ℓ = 0 left out)."""
    return np.sqrt(degree_errors(a, b, d)[..., 1:].sum(axis=-1))


def density_w2_points(rho, grid, N=W2_NODES):
    r"""The band-limited density of nodal values ``rho`` (G,) on the circle ``grid`` as N
    weighted points: angles :math:`2\pi j/N`, masses :math:`\rho(\theta_j)\,2\pi/N`
    (synthesis of its coefficients; within :math:`W_\infty \le \pi/N` of ρ)."""
    c = grid.analysis(rho)
    full = np.zeros(N // 2 + 1, dtype=complex)
    full[: c.shape[-1]] = c
    vals = np.fft.irfft(full * N, n=N)
    return 2 * np.pi * np.arange(N) / N, np.maximum(vals, 0.0)


# ---------------------------------------------------------------------------------- the study
def _task_name(kind, cfg_name, value, half=False):
    return f"{'half-' if half else ''}{kind}-{cfg_name}-{value}"


@register_study
class MeanField(Study):
    """n particles (spectral summation) against the spectral density on S¹: the distance of
    the first harmonics and W₂ in n, fitted rate, the density's own error (L against 2L),
    the growth of the fluctuations against the rates of [model §6c].

    Full: four configurations (:data:`CONFIGS`), n ∈ {10³, …, 10⁶} (6 samples, 3 at 10⁶),
    T = 1, Δt = 0.25, degree K ∈ {32, 64}, the convergence table (K = 8, 16 against 64) and
    the finite volumes at N ∈ {512, 1024}. Quick: the near-uniform start, n ∈ {100, 300,
    1000} × 6 samples, T = 0.5, K ∈ {16, 32}, direct summation, no W₂.
    """

    name = "meanfield"
    d = 2
    question = ("how fast do n particles converge to the mean-field PDE on S¹ (the first "
                "Fourier coefficients and W₂ against the spectral density, rate in n)?")
    quick = ("the near-uniform start, n ∈ {100, 300, 1000} × 6 samples, T = 0.5, K ∈ {16, 32}, "
             "no W₂ (n·D² is the CLT variance, the degree-1 fluctuation grows at §6c's rate)")

    def grid(self, scale):
        return GRID[(scale, self.d)]

    def base(self, scale):
        g = self.grid(scale)
        cfg = copy.deepcopy(MEANFIELD_BASE)
        cfg["model"]["d"] = self.d
        cfg["solver"].update(T=g["T"], dt=g["dt"], record_every=g["record_every"],
                             paths=g["seeds"])
        return cfg

    def variants(self, base, scale):
        g = self.grid(scale)
        P = int(base["solver"]["paths"])
        first = int(base["init"].get("first_path", 0))
        tasks = []
        for name in g["configs"]:
            kappa, eps, sign, norm = CONFIGS[name]
            c0 = copy.deepcopy(base)
            c0["model"].update(sign=sign, normalization=norm)
            c0["init"]["kappa"] = kappa
            if eps:
                c0["init"]["weight_perturbation"] = eps
            degrees = sorted(set(g["degree"]) | (set(g["conv"]) if name == g.get("conv_config")
                                                 else set()))
            for L in degrees:
                c = copy.deepcopy(c0)
                c["solver"].update(representation="density", method="ssprk3", paths=1)
                c["init"].pop("per_path_tokens", None)
                c["density"] = {"representation": "spectral", "degree": int(L)}
                tasks += expand_grid(c, {}, name=_task_name("spectral", name, f"L={L}"))
            if name == g["configs"][0]:
                for N in g["cells"]:
                    c = copy.deepcopy(c0)
                    c["solver"].update(representation="density", method="ssprk3", paths=1)
                    c["init"].pop("per_path_tokens", None)
                    c["density"] = {"cells": int(N)}
                    tasks += expand_grid(c, {}, name=_task_name("fv", name, f"N={N}"))
            ns = list(g["n"]) + ([N_TOP] if name in g["n_top"] else [])
            for k, n in enumerate(ns):
                c = copy.deepcopy(c0)
                c["model"]["n"] = int(n)
                c["solver"]["summation"] = g["summation"]
                c["solver"]["paths"] = int(g["seeds_at"].get(n, P))
                # independent across n: path block k of the ensemble of init.seed
                c["init"]["first_path"] = first + k * P
                tasks += expand_grid(c, {}, name=_task_name("particles", name, f"n={n}"))
                if name == g["configs"][0] and k == len(g["n"]) - 1:
                    h = copy.deepcopy(c)  # the same samples at Δt/2: the time-step error
                    h["solver"]["dt"] = c["solver"]["dt"] / 2
                    h["solver"]["record_every"] = 2 * c["solver"]["record_every"]
                    h["solver"]["paths"] = 1
                    tasks += expand_grid(h, {}, name=_task_name("particles", name, f"n={n}",
                                                                half=True))
        return tasks

    def summarize(self, data):
        res = meanfield_errors(data)
        return meanfield_summary(res)

    def figures(self, data, outdir, formats):
        from wflow.figures import meanfield as figs

        res = meanfield_errors(data)
        return figs.draw(res, fit_table(res), growth_table(res), outdir, formats,
                         name=self.name)


# ---------------------------------------------------------------------------------- analysis
def _grid_of(data):
    """(Λ, whether W₂ is measured) of the grid the tasks were made from."""
    for _, cfg in data.tasks:
        g = GRID.get((data.scale, int(cfg["model"]["d"])), GRID[("full", 2)])
        return int(g["Lambda"]), bool(g.get("w2", True))
    raise ValueError("meanfield: no tasks")


def meanfield_errors(data):
    r"""Every measured error, from the result files.

    Returns
    -------
    dict with ``d``, ``t`` (records,), ``Lambda``, ``configs`` (names in order) and per
    configuration ``res["cfg"][name]``: ``rho_ref`` (records, G) the nodal values of degree
    ``L_ref``, ``n`` (sorted), per n ``D[n]`` (records, P) the
    smooth distance to the degree-2L density, ``e2[n]`` (records, P, Λ+1) the per-degree
    :math:`e_\ell^2`, (S¹) ``w2[n]`` (records, P); ``density`` {"L", "D" (records,) and
    (S¹) "w2" (records,) of degree L against 2L}; ``conv`` {degree: (relative L² error
    (records,), seconds per step)}; (S¹) ``fv`` {N: D (records,) against the spectral
    reference}, ``fv_self`` (records,) N against 2N; ``dt_check`` {"n", "D" (records,)}
    (Δt against Δt/2, same sample); ``config`` (a particle configuration).
    """
    if getattr(data, "_meanfield", None) is not None:
        return data._meanfield
    from wflow.geometry.harmonics import harmonics

    Lam, grid_w2 = _grid_of(data)
    runs = {}
    d = None
    wall = {}
    for path, (tname, cfg) in zip(data.paths, data.tasks):
        kind, rest = tname.split("-", 1) if not tname.startswith("half-") else ("half",
                                                                                tname[5:])
        if kind == "half":
            kind, rest = rest.split("-", 1)
            kind = "half-" + kind
        name, value = rest.rsplit("-", 1)
        runs.setdefault(name, {}).setdefault(kind, {})[value] = (path, cfg)
        d = int(cfg["model"]["d"])
        try:
            wall[tname] = float(np.nanmean(data.column("wall_time", tname)))
        except (KeyError, TypeError, ValueError):
            wall[tname] = float("nan")
    out = {"d": d, "Lambda": Lam, "configs": list(runs), "cfg": {}}
    for name, kinds in runs.items():
        spec = {}
        for value, (path, cfg) in kinds["spectral"].items():
            _, arr = load_source(path)
            L = int(value.split("=")[1])
            g = harmonics(d, L)
            rho = np.asarray(arr["rho"], float)[:, 0]
            t = np.asarray(arr["t"], float)
            steps = round(float(cfg["solver"]["T"]) / float(cfg["solver"]["dt"]))
            spec[L] = (t, g, rho, wall[_task_name("spectral", name, value)] / steps)
        Ls = sorted(spec)
        Lf = Ls[-1]
        t, gf, rhof, _ = spec[Lf]
        ref = density_coefficients(rhof, gf, Lam)  # (records, ...)
        full = gf.analysis(rhof)
        r = {"t": t, "n": [], "D": {}, "e2": {}, "w2": {}, "L_ref": Lf, "rho_ref": rhof}
        w2ref = None
        want_w2 = d == 2 and grid_w2
        if want_w2:
            w2ref = [density_w2_points(rhof[k], gf) for k in range(len(t))]
        # the density's own error (L against 2L) and the convergence table
        L0 = max(x for x in Ls if x < Lf) if len(Ls) > 1 else None
        conv = {}
        for L in Ls:
            _, g, rho, tstep = spec[L]
            c = g.analysis(rho)
            # relative L² distance by Parseval (S¹: the coefficients of both degrees)
            if d == 2:
                dc = np.zeros_like(full)
                dc[..., : c.shape[-1]] = c
                num = np.abs(dc - full) ** 2
                num = num[..., 0] + 2 * num[..., 1:].sum(-1)
                den = np.abs(full) ** 2
                den = den[..., 0] + 2 * den[..., 1:].sum(-1)
            else:
                dc = np.zeros_like(full)
                dc[..., : c.shape[-2], : c.shape[-1]] = c
                num = np.abs(dc - full) ** 2
                num = (num[..., 0] + 2 * num[..., 1:].sum(-1)).sum(-1)
                den = np.abs(full) ** 2
                den = (den[..., 0] + 2 * den[..., 1:].sum(-1)).sum(-1)
            conv[L] = (np.sqrt(num / den), tstep)
        r["conv"] = conv
        if L0 is not None:
            _, g0, rho0, _ = spec[L0]
            r["density"] = {"L": L0, "D": smooth_distance(density_coefficients(rho0, g0, Lam),
                                                          ref, d)}
            if want_w2:
                r["density"]["w2"] = np.array([
                    w2_circle(w2ref[k][0], w2ref[k][0], w2ref[k][1],
                              density_w2_points(rho0[k], g0)[1]) for k in range(len(t))])
        for value, (path, _cfg) in kinds.get("fv", {}).items():
            _, arr = load_source(path)
            rho = np.asarray(arr["rho"], float)[:, 0]
            r.setdefault("fv", {})[int(value.split("=")[1])] = smooth_distance(
                fv_coefficients(rho, Lam), ref, d)
            r.setdefault("_fvc", {})[int(value.split("=")[1])] = fv_coefficients(rho, Lam)
        if "_fvc" in r:
            Ns = sorted(r["_fvc"])
            if len(Ns) > 1:
                r["fv_self"] = smooth_distance(r["_fvc"][Ns[-2]], r["_fvc"][Ns[-1]], d)
            del r["_fvc"]
        X_by_n = {}
        for value, (path, _cfg) in kinds["particles"].items():
            n = int(value.split("=")[1])
            cfgp, arr = load_source(path)
            tn = np.asarray(arr["t"], float)
            if not np.allclose(tn, t):
                raise ValueError(f"meanfield: the records of {name} n = {n} and of the "
                                 "density differ")
            X = np.asarray(arr["X"], float)  # (records, P, n, d)
            c = particle_coefficients(X, Lam)
            e2 = degree_errors(c, ref[:, None], d)
            r["D"][n] = np.sqrt(e2[..., 1:].sum(-1))
            r["e2"][n] = e2
            if want_w2:
                th = circle_angles(X)
                r["w2"][n] = np.array([w2_circle(th[k], w2ref[k][0], None, w2ref[k][1])
                                       for k in range(len(t))])  # (records, P), batched
            X_by_n[n] = c
            r["n"].append(n)
            out["config"] = cfgp
        for value, (path, _cfg) in kinds.get("half-particles", {}).items():
            n = int(value.split("=")[1])
            _, arr = load_source(path)
            ch = particle_coefficients(np.asarray(arr["X"], float), Lam)
            r["dt_check"] = {"n": n, "D": smooth_distance(X_by_n[n][:, :1], ch, d)[:, 0]}
        r["n"] = np.array(sorted(r["n"]))
        r["setting"] = CONFIGS.get(name)
        out["cfg"][name] = r
        out["t"] = t
    data._meanfield = out
    return out


def fit_exponent(n, samples, level=0.95):
    r"""The exponent a of :math:`\bar y(n) \approx C n^{a}` (least squares of
    :math:`\log\bar y` on :math:`\log n`, :math:`\bar y` the mean over samples) and its 95%
    jackknife Student-t interval, each n's samples independent
    (:func:`wflow.analysis.intervals.power_law_interval`, ``paired=False``).

    Returns
    -------
    a, C, (lo, hi)
    """
    fit = power_law_interval(n, [np.asarray(s, dtype=float) for s in samples], level,
                             paired=False, unit="samples")
    return fit.estimate, fit.extra["a"], (fit.low, fit.high)


def fit_table(res):
    """``{config: {t: {"D": (a, C, ci)[, "w2": (a, C, ci)]}}}`` at every record time."""
    out = {}
    for name, r in res["cfg"].items():
        n = r["n"]
        out[name] = {}
        for k, t in enumerate(res["t"]):
            f = {"D": fit_exponent(n, [r["D"][m][k] for m in n])}
            if r["w2"]:
                f["w2"] = fit_exponent(n, [r["w2"][m][k] for m in n])
            out[name][float(t)] = f
    return out


def growth_table(res, level=0.95):
    r"""Per near-uniform configuration (κ ≤ 0.1, D = I) and per degree ℓ = 1..Λ, at the last
    record time T: the measured :math:`G_\ell = \overline{n e_\ell^2(T)}/
    \overline{n e_\ell^2(0)}` (means over every sample of every n, each sample one unit)
    with its 95% jackknife Student-t interval (leave one sample out of both means, on
    :math:`\log G_\ell`), against :math:`e^{2\sigma\lambda_\ell T}` of [model §6c].
    ``{config: {ℓ: (G, (lo, hi), predicted)}}``."""
    from scipy import stats

    from wflow.model.uniform_state import derived_rate

    out = {}
    T = float(res["t"][-1])
    beta = float((res.get("config") or {}).get("model", {}).get("beta", 1.0))
    for name, r in res["cfg"].items():
        setting = r["setting"]
        if setting is None or setting[1] != 0.0 or setting[0] > 0.1:
            continue
        _, _, sign, norm = setting
        s = 1.0 if sign == "ascent" else -1.0
        a0 = np.concatenate([m * r["e2"][m][0] for m in r["n"]])  # (samples, Λ+1)
        aT = np.concatenate([m * r["e2"][m][-1] for m in r["n"]])
        P = a0.shape[0]
        q = float(stats.t.ppf(0.5 + level / 2, P - 1))
        out[name] = {}
        for ell in range(1, a0.shape[-1]):
            x, y = aT[:, ell], a0[:, ell]
            est = np.log(x.mean() / y.mean())
            loo = np.log((x.sum() - x) / (y.sum() - y))
            se = np.sqrt((P - 1) / P * np.sum((loo - loo.mean()) ** 2))
            lam = float(derived_rate(ell, beta, norm, 0.0, res["d"]))
            out[name][ell] = (float(np.exp(est)),
                              (float(np.exp(est - q * se)), float(np.exp(est + q * se))),
                              float(np.exp(2 * s * lam * T)))
    return out


def meanfield_summary(res):
    """``(text, table)``: per configuration, n and t the mean smooth distance (and W₂ on S¹)
    with 95% t-intervals over samples, √n times it; the fitted exponents; the density's own
    error against the particles' at the largest n; the growth table; the convergence table
    and the finite-volume agreement (S¹)."""
    d = res["d"]
    t = res["t"]
    S = "S^1" if d == 2 else "S^2"
    fits = fit_table(res)
    table = {k: [] for k in ("config", "n", "t", "samples", "D_mean", "D_ci95", "sqrtn_D",
                             "w2_mean", "w2_ci95")}
    w2 = "the circle W2" if any(r["w2"] for r in res["cfg"].values()) else "no W2"
    lines = [f"particles against the spectral density on {S}: smooth distance D "
             f"(harmonic degrees 1..{res['Lambda']}) and {w2}; ± : 95% t-interval over samples"]
    for name, r in res["cfg"].items():
        kappa, eps, sign, norm = r["setting"]
        lines += ["", f"[{name}] kappa = {kappa}, D = "
                  + ("I" if not eps else f"I + {eps} S") + f", {sign}, normalization = {norm}, "
                  f"density degree {r['density']['L']} against {r['L_ref']}",
                  f"{'n':>8}{'t':>6}{'D mean':>12}{'± 95%':>10}{'sqrt(n) D':>11}"
                  + (f"{'W2 mean':>12}{'± 95%':>10}" if r["w2"] else "")]
        for n in r["n"]:
            for k, tt in enumerate(t):
                D = r["D"][n][k]
                w = r["w2"][n][k] if r["w2"] else np.array([np.nan])
                row = dict(config=name, n=int(n), t=float(tt), samples=D.size,
                           D_mean=float(D.mean()), D_ci95=mean_ci(D),
                           sqrtn_D=float(np.sqrt(n) * D.mean()), w2_mean=float(w.mean()),
                           w2_ci95=mean_ci(w) if r["w2"] else float("nan"))
                for kk, v in row.items():
                    table[kk].append(v)
                lines.append(f"{n:>8d}{tt:>6.2f}{row['D_mean']:>12.4e}{row['D_ci95']:>10.2e}"
                             f"{row['sqrtn_D']:>11.4f}"
                             + (f"{row['w2_mean']:>12.4e}{row['w2_ci95']:>10.2e}"
                                if r["w2"] else ""))
        lines += [f"  fitted exponents (mean ≈ C n^a, n = {int(r['n'][0])} … {int(r['n'][-1])}; "
                  "95% jackknife Student-t over samples, each n independent)"]
        for tt, f in fits[name].items():
            a, C, (lo, hi) = f["D"]
            s = f"  t = {tt:4.2f}: a(D) = {a:.3f} [{lo:.3f}, {hi:.3f}], C = {C:.3f}"
            if "w2" in f:
                a2, C2, (lo2, hi2) = f["w2"]
                s += f"; a(W2) = {a2:.3f} [{lo2:.3f}, {hi2:.3f}], C = {C2:.3f}"
            lines.append(s)
        nmax = int(r["n"][-1])
        samp = np.array([r["D"][nmax][k].mean() for k in range(len(t))])
        dens = r["density"]["D"]
        ok = bool(np.all(dens < samp))
        lines.append(f"  density error D(L = {r['density']['L']}, {r['L_ref']}) = "
                     + ", ".join(f"{x:.2e}" for x in dens) + f" (t = {', '.join(f'{x:g}' for x in t)})"
                     f"; particle D at n = {nmax}: " + ", ".join(f"{x:.2e}" for x in samp)
                     + f"; below at every t: {'yes' if ok else 'NO'}")
        if "w2" in r["density"]:
            lines.append("  density error W2(L, 2L) = "
                         + ", ".join(f"{x:.2e}" for x in r["density"]["w2"]))
        if "dt_check" in r:
            dc = r["dt_check"]
            lines.append(f"  particle time step: D(Δt, Δt/2) on one sample at n = {dc['n']}: "
                         + ", ".join(f"{x:.2e}" for x in dc["D"]))
    gt = growth_table(res)
    if gt:
        lines += ["", f"fluctuation growth to t = {t[-1]:g}: G_l = mean n e_l^2(T) / mean "
                      "n e_l^2(0) (every sample of every n; 95% jackknife) against "
                      "exp(2 sigma lambda_l T), lambda_l of model §6c",
                  f"{'config':>22}{'l':>3}{'G measured':>12}{'95% CI':>20}{'predicted':>11}"]
        for name, rows in gt.items():
            for ell, (G, (lo, hi), p) in rows.items():
                lines.append(f"{name:>22}{ell:>3d}{G:>12.3f}   [{lo:>6.3f}, {hi:>6.3f}]"
                             f"{p:>11.3f}")
    for name, r in res["cfg"].items():
        if len(r["conv"]) > 2:
            lines += ["", f"convergence in the degree ({name}): relative L2 distance to "
                          f"degree {r['L_ref']} at t = {t[-1]:g}, seconds per step "
                          f"(Δt = {(res.get('config') or {}).get('solver', {}).get('dt')}, "
                          "all CFL substeps)",
                      f"{'degree':>8}{'rel. L2 error':>15}{'s/step':>10}"]
            for L, (err, ts) in sorted(r["conv"].items()):
                lines.append(f"{L:>8d}{err[-1]:>15.2e}{ts:>10.3g}")
        if "fv" in r:
            lines += ["", f"finite volumes against the spectral density ({name}, degree "
                          f"{r['L_ref']}), smooth distance D at t = "
                      + ", ".join(f"{x:g}" for x in t)]
            for N, v in sorted(r["fv"].items()):
                lines.append(f"  N = {N}: " + ", ".join(f"{x:.2e}" for x in v))
            if "fv_self" in r:
                lines.append("  N against 2N: " + ", ".join(f"{x:.2e}" for x in r["fv_self"]))
    return "\n".join(lines), table
