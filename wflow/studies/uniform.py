r"""The uniform state: linear growth rates of its modes, the critical noise, the transition.

Setting [model §6c]: one head, frozen :math:`D = V = I`, ascent (σ = +1), normalisation
``head`` (SA) or ``none`` (USA), token diffusion ν; then the uniform density
:math:`\bar\rho = 1/\lvert S^{d-1}\rvert` is an equilibrium, and a perturbation
:math:`\bar\rho(1 + a\,\varphi_k)` (:math:`\varphi_k = \cos k\theta` on S¹, a spherical
harmonic of degree ℓ on S²) grows at the derived rate

.. math:: \lambda_k = k^2\Big(\frac{I_k(\beta)}{\beta\,c} - \nu\Big), \qquad
          c = I_0(\beta)\ (\texttt{head}),\ 1\ (\texttt{none}),

on S¹ (:math:`\ell(\ell+1)` and :math:`i_\ell(\beta)`, :math:`i_0(\beta)` on S²), so the uniform
state is linearly unstable for :math:`\nu < \nu_c = I_1(\beta)/(\beta c)` (S²:
:math:`i_1(\beta)/(\beta c)`).

Parts (one density run per task unless said):

- ``growth``: ν = 0, start ``uniform_mode`` k with ε = 1e-4; the rate is the least-squares
  slope of :math:`\log A_k(t)` (the Fourier amplitude, :func:`mode_amplitude`) over the records
  with :math:`A_k \le` ``A_CAP`` (the linear phase), with its standard error; repeated at
  N/2 cells and at Δt/2 for one (normalisation, β): the discretisation check.
- ``critical``: mode 1 at :math:`\nu = \nu_c(1 + \delta)`, δ ∈ ``DELTAS``; the measured rates are
  fitted linearly in ν and :math:`\nu_c` is the zero crossing (standard error by the delta
  method); again at Δt/2, and the Richardson value (Heun: the rate's error is O(Δt²)).
- ``sweep``: the stationary order parameter :math:`r = \lvert\int\rho\,e^{i\theta}\rvert` at
  time T from a near-uniform start (``uniform_mode`` 1, ε = 0.05) and from a clustered start
  (``vmf``, κ = 10) for ν across ν_c: the two branches, against the derived stationary branch
  (:func:`stationary_branch`); equal end states on both sides of ν_c mean no hysteresis.
- ``particles`` (full scale): n = 1024 noisy particles (projected Euler–Maruyama) at the same
  ν, uniform start, r over paths; and ν = 0 runs at large β, the cluster count at a moderate
  time against the fastest-growing mode :math:`k^* = \arg\max_k \lambda_k`.
- ``sphere`` (full scale): S² coarse (Voronoi N = 250, 500, 1000), ``head``, β ∈ {2, 8},
  the degrees ℓ = 1, 2, 3.
- ``s2crit`` (full scale): the S² ν_c (``head``, β ∈ {2, 8}, degree 1) on N = 250, 500,
  1000, each run paired with its uniform start; Δt/2 on N = 500; the observed order in 1/N
  and the extrapolation (:meth:`Uniform.critical_s2`).
- ``s2part``, ``s2dens`` (full scale): S² particles (n = 512, 4 paths) beside the density
  (N = 250, 500, 1000) at a few ν, against :func:`stationary_r_s2`.
- ``hyst`` (:meth:`Uniform.chains`): continuation sweeps, ν/ν_c up through 1 and back
  down, each link from the previous one's final density times :math:`1 + \varepsilon\cos\theta`
  (:meth:`Uniform.continue_from`), link time :func:`plateau_T` [model §6c].

Quick: S¹, N = 64, ``head`` and ``none`` at β = 2, k = 1..3, one ν_c, a short sweep, a
three-link continuation (N = 32); the claims tested in ``tests/test_study_uniform.py``.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
from scipy import optimize, special

from wflow import config as _config
from wflow.analysis.intervals import mean_interval
from wflow.analysis.results import load_source
from wflow.studies._base import Study, final_state, register_study

__all__ = ["Uniform", "derived_rate", "critical_nu", "mode_amplitude", "fit_rate",
           "order_parameter", "other_amplitude", "stationary_branch", "UNIFORM_BASE",
           "plateau_T", "stable_r", "stationary_r_s2"]

UNIFORM_BASE = {
    "model": {"d": 2, "n": 8, "beta": 2.0, "heads": 1, "normalization": "head",
              "sign": "ascent", "values": "identity", "diffusion": 0.0},
    "init": {"tokens": "uniform_mode", "mode": 1, "amplitude": 1e-4, "weights": "identity",
             "seed": 0},
    "weights": {"process": "frozen"},
    "solver": {"representation": "density", "method": "heun", "dt": 0.05, "T": 10.0,
               "record_every": 2, "paths": 1},
    "density": {"cells": 128},
    "diagnostics": {"ledger": False, "clustering": False},
    "output": {"store_tokens": True},
}
#: the linear phase: records with the relative amplitude at most this
A_CAP = 1e-2
#: ν = ν_c (1 + δ) in the critical-ν runs
DELTAS = (-0.2, -0.1, 0.1, 0.2)
#: continuation sweeps: T per ν = min(T_max, max(T_MIN, C_RELAX/|λ_1|)), λ_1 = μ_1(ν_c − ν)
C_RELAX = 8.0
T_MIN = 20.0
#: continuation sweeps: the relative mode-1 kick ε of every link's start, ρ ← ρ(1 + ε φ_1)
KICK = 1e-3
#: a sweep point is stationary if |r(T) − r(0.8 T)| is below this and r does not grow by
#: more than ``GROWTH_TOL`` r(T) (a state leaving the uniform one from the kick)
DRIFT_TOL = 1e-3
GROWTH_TOL = 0.05
#: ν/ν_c of the continuation sweeps (up; down is the reverse)
HYST_F = (0.85, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.15)
#: the same for ``none`` β = 4, denser inside the derived window (ν_c, 1.0589 ν_c)
HYST_F4 = (0.9, 0.95, 0.98, 1.02, 1.04, 1.07, 1.1)
#: S² ``none`` β = 4: the derived window is (ν_c, 1.2–1.3 ν_c) (:func:`stationary_r_s2`)
HYST_F_S2 = (0.9, 1.02, 1.05, 1.1, 1.2, 1.3, 1.4)


# ---------------------------------------------------------------------------- derived
def _coeff(ell, beta, d):
    """Kernel coefficient: :math:`I_\\ell(\\beta)` (S¹), :math:`i_\\ell(\\beta)` (S²)."""
    if d == 2:
        return special.iv(ell, beta)
    return special.spherical_in(ell, beta)


def _eig(k, d):
    return k * k if d == 2 else k * (k + 1)


def derived_rate(k, beta, normalization="head", nu=0.0, d=2):
    r"""Linear growth rate of mode k of the uniform state [model §6c].

    .. math:: \lambda_k = \mu_k\Big(\frac{c_k(\beta)}{\beta\,c_0^{\,s}} - \nu\Big),\qquad
              \mu_k = k^2\ (S^1),\ \ell(\ell+1)\ (S^2),

    :math:`c_k = I_k` (S¹), :math:`i_\ell` (S², modified spherical Bessel), s = 1 for
    ``head``, 0 for ``none``.
    """
    k = np.asarray(k)
    c = _coeff(k, beta, d) / beta
    if normalization == "head":
        c = c / _coeff(0, beta, d)
    return _eig(k, d) * (c - nu)


def critical_nu(beta, normalization="head", d=2):
    r""":math:`\nu_c = c_1(\beta)/(\beta c_0^{\,s})`: the largest ν with a growing mode (mode 1;
    :math:`c_k` decreases in k)."""
    return float(derived_rate(1, beta, normalization, 0.0, d) / _eig(1, d))


def winning_mode(beta, normalization="head", kmax=60, d=2):
    r""":math:`k^* = \arg\max_k \lambda_k(\beta)` at ν = 0."""
    ks = np.arange(1, kmax + 1)
    return int(ks[np.argmax(derived_rate(ks, beta, normalization, 0.0, d))])


def plateau_T(nu, beta, normalization="head", d=2, c=C_RELAX, t_min=T_MIN, t_max=1000.0,
              grow=False):
    r"""The time a continuation link at ν runs (critical slowing down):

    .. math:: T(\nu) = \min\big(T_{\max},\ \max\big(T_{\min},\ c'/\lvert\lambda_1\rvert\big)\big),
              \qquad \lambda_1 = \mu_1(\nu_c - \nu)

    (:math:`\mu_1` = 1 on S¹, 2 on S²): c' = c e-folds of the slowest linear mode, enough to
    forget the previous ν (a relative change :math:`e^{-c}`); with ``grow`` and ν < ν_c (a
    link of the down sweep, which may start at the uniform state plus the kick ``KICK``)
    :math:`c' = c + \ln(1/\varepsilon)`, the e-folds to grow from ε to O(1) first."""
    nuc = critical_nu(beta, normalization, d)
    lam = _eig(1, d) * abs(nuc - nu)
    if grow and nu < nuc:
        c = c + np.log(1.0 / KICK)
    return float(min(t_max, max(t_min, c / lam if lam > 0 else t_max)))


def stationary_branch(beta, normalization, r_values, K=16, M=1024):
    r"""The derived non-uniform stationary states on S¹, parametrised by :math:`r = c_1`.

    Stationary: :math:`\rho \propto e^{Z/(\beta\nu)}` (``none``),
    :math:`\rho \propto Z^{1/(\beta\nu)}` (``head``), with
    :math:`Z(\theta) = I_0 + 2\sum_k I_k(\beta)c_k\cos k\theta`, :math:`c_k = \int\rho\cos k\theta`
    (an even state). For each r the unknowns ν and :math:`c_2..c_K` solve
    :math:`c_k = \int\rho\cos k\theta`, k = 1..K (continuation in r).

    Returns
    -------
    nu : (len(r_values),) array (NaN where the solve failed).
    """
    th = 2 * np.pi * (np.arange(M) + 0.5) / M
    ks = np.arange(1, K + 1)
    cos = np.cos(np.outer(ks, th))
    Ik = special.iv(ks, beta)
    nu0 = critical_nu(beta, normalization)

    def resid(u, r):
        nu = np.exp(u[0])
        c = np.concatenate([[r], u[1:]])
        Z = special.iv(0, beta) + 2 * (Ik * c) @ cos
        if np.any(Z <= 0):
            return np.full(K, 1e3)
        psi = Z / (beta * nu) if normalization == "none" else np.log(Z) / (beta * nu)
        w = np.exp(psi - psi.max())
        rho = w / (w.sum() * 2 * np.pi / M)
        cc = cos @ rho * 2 * np.pi / M
        return cc - c

    out = np.full(len(r_values), np.nan)
    u = np.concatenate([[np.log(nu0)], np.zeros(K - 1)])
    for i, r in enumerate(r_values):
        sol, info, ier, _ = optimize.fsolve(resid, u, args=(r,), full_output=True, xtol=1e-12)
        if ier == 1 and np.max(np.abs(info["fvec"])) < 1e-9:
            out[i] = np.exp(sol[0])
            u = sol
    return out


def stationary_r_s2(beta, normalization, nu, M=200, iters=20000, tol=1e-12):
    r"""The order parameter :math:`r = \lvert\int x\rho\rvert` of the stable axisymmetric
    stationary state on S² (derived; 0 where the iteration falls to the uniform state).

    :math:`\rho \propto e^{Z/(\beta\nu)}` (``none``), :math:`Z^{1/(\beta\nu)}` (``head``),
    :math:`Z(s) = \int_{-1}^{1} K(s, s')\rho(s')\,ds'`, s the cosine of the polar angle,
    :math:`K(s, s') = 2\pi e^{\beta s s'} I_0(\beta\sqrt{1-s^2}\sqrt{1-s'^2})` (the
    azimuth integrated); Gauss–Legendre with M nodes, the damped fixed-point iteration
    :math:`\rho \leftarrow (\rho + \Phi(\rho))/2` from a clustered start (it converges to
    the stable state; slowly near ν_c, where its contraction factor tends to 1)."""
    s, w = np.polynomial.legendre.leggauss(M)
    st = np.sqrt(1 - s**2)
    K = (2 * np.pi * np.exp(beta * (np.outer(s, s) + np.outer(st, st)))
         * special.i0e(beta * np.outer(st, st)))
    rho = np.exp(10 * (s - 1))
    rho /= 2 * np.pi * (w @ rho)
    for _ in range(iters):
        Z = K @ (w * rho)
        psi = Z / (beta * nu) if normalization == "none" else np.log(Z) / (beta * nu)
        new = np.exp(psi - psi.max())
        new /= 2 * np.pi * (w @ new)
        done = np.max(np.abs(new - rho)) < tol * np.max(rho)
        rho = 0.5 * (rho + new)
        if done:
            break
    r = float(2 * np.pi * (w @ (s * rho)))
    return r if r > 1e-8 else 0.0


def landau_beta_none():
    r"""The β where the ``none`` bifurcation on S¹ turns discontinuous: :math:`I_2(\beta) =
    I_1(\beta)/2` (continuous below, subcritical above; [model §6c])."""
    return float(optimize.brentq(lambda b: special.iv(2, b) - 0.5 * special.iv(1, b), 0.1, 20))


# ---------------------------------------------------------------------------- measured
def mode_amplitude(rho, k, d=2, mesh=None, ref=None):
    r"""Relative amplitude of mode k of cell averages :math:`\rho_j` on S¹ (any phase):

    .. math:: A_k = \frac{2\,\lvert\sum_j \rho_j h\, e^{-ik\theta_j}\rvert}
                         {\operatorname{sinc}(kh/2)}

    (for :math:`\rho = \bar\rho(1 + a\cos k\theta)`, :math:`A_k = \lvert a\rvert`; the sinc undoes
    the cell average). On S² (``mesh``): :math:`A_\ell = (\sum_m (\sum_j \delta m_j
    \tilde Y_{\ell m}(c_j))^2)^{1/2}` with :math:`\delta m_j = (\rho_j - \rho^{\rm ref}_j)
    \lvert K_j\rvert`, ``ref`` the run from the uniform start on the same mesh (on a Voronoi
    mesh the discrete uniform state is not an exact equilibrium, and the quadrature of
    :math:`\tilde Y` is not exactly 0: both are O(h²) and removed by the reference, to first
    order); default the constant :math:`1/(4\pi)`.
    ``rho`` is (..., N); returns (...).
    """
    rho = np.asarray(rho, dtype=float)
    if d == 2:
        N = rho.shape[-1]
        h = 2 * np.pi / N
        th = (np.arange(N) + 0.5) * h
        z = rho @ np.exp(-1j * k * th) * h
        return 2 * np.abs(z) / np.sinc(k * h / 2 / np.pi)
    from wflow.model.density import real_harmonic

    m = (rho - (1 / (4 * np.pi) if ref is None else ref)) * mesh.areas
    Y = np.stack([real_harmonic(k, mm, mesh.centres) for mm in range(-k, k + 1)], axis=-1)
    return np.sqrt(np.sum((m @ Y) ** 2, axis=-1))


def other_amplitude(rho, k, d=2, mesh=None, ref=None):
    r"""The size of the perturbation outside mode k, relative to :math:`\bar\rho`.

    S¹: :math:`(\sum_{j \ne 0, \pm k} \lvert\hat u_j\rvert^2)^{1/2}` of
    :math:`u = \rho/\bar\rho - 1` (the root mean square over the circle, by Parseval); S²: the
    area-weighted root mean square of u minus its projection on degree ℓ = k.
    """
    rho = np.asarray(rho, dtype=float)
    if d == 2:
        N = rho.shape[-1]
        u = rho * 2 * np.pi - 1
        c = np.fft.rfft(u, axis=-1) / N
        c[..., 0] = 0
        c[..., k] = 0
        w = np.full(c.shape[-1], 2.0)
        if N % 2 == 0:
            w[-1] = 1.0
        return np.sqrt(np.sum(w * np.abs(c) ** 2, axis=-1))
    from wflow.model.density import real_harmonic

    u = 4 * np.pi * (rho - (1 / (4 * np.pi) if ref is None else ref))
    Y = np.stack([real_harmonic(k, mm, mesh.centres) for mm in range(-k, k + 1)], axis=-1)
    a = (u * mesh.areas) @ Y / (4 * np.pi)
    res = u - a @ Y.T
    return np.sqrt(res**2 @ mesh.areas / (4 * np.pi))


def order_parameter(rho, mesh=None):
    r""":math:`r = \lvert\int\rho\,e^{i\theta}\rvert = A_1/2` of S¹ cell averages (..., N);
    on S² (``mesh``) :math:`r = \lvert\sum_j \rho_j\lvert K_j\rvert\,c_j\rvert` (the
    particles' :math:`\lvert\bar x\rvert`)."""
    if mesh is not None:
        return np.linalg.norm((np.asarray(rho, dtype=float) * mesh.areas) @ mesh.centres,
                              axis=-1)
    return 0.5 * mode_amplitude(rho, 1)


def fit_rate(t, A, cap=A_CAP, a_min=1e-12, other=None):
    r"""Growth rate from the linear phase: least squares of :math:`\log A = \log A_0 + \lambda t`
    over the first records with ``a_min`` < A ≤ ``cap`` and, if given, ``other`` ≤ A/10 (the
    rest of the perturbation, :func:`other_amplitude`: modes seeded by round-off grow at their
    own rates and, once comparable, feed mode k nonlinearly).

    Returns
    -------
    rate, se, npts : slope, its standard error :math:`s/\sqrt{\sum(t-\bar t)^2}` (residual
    standard deviation s, n − 2 degrees of freedom; it measures the departure from
    exponential growth, nonlinearity included), points used.
    """
    t = np.asarray(t, dtype=float)
    A = np.asarray(A, dtype=float)
    ok = (A <= cap) & (A > a_min)
    if other is not None:
        ok &= np.asarray(other, dtype=float) <= 0.1 * A
    # the linear phase is the first stretch: stop at the first record past the cap
    stop = np.argmax(~ok) if not ok.all() else len(ok)
    t, y = t[:stop], np.log(A[:stop])
    if len(t) < 3:
        return float("nan"), float("nan"), len(t)
    p, res, *_ = np.polyfit(t, y, 1, full=True)
    s2 = float(res[0]) / (len(t) - 2) if len(res) else 0.0
    se = np.sqrt(max(s2, 0.0) / np.sum((t - t.mean()) ** 2))
    return float(p[0]), float(se), len(t)


def _zero_crossing(rs):
    r"""``{"nu_c", "se", "slope"}``: the least-squares line rate = a + b ν through the records
    ``rs``; :math:`\nu_c = -a/b`, its SE by the delta method from the fit's covariance."""
    nu = np.array([r["nu"] for r in rs])
    lam = np.array([r["rate"] for r in rs])
    X = np.stack([np.ones_like(nu), nu], axis=1)
    coef, res, *_ = np.linalg.lstsq(X, lam, rcond=None)
    dof = max(len(nu) - 2, 1)
    s2 = float(res[0]) / dof if len(res) else 0.0
    cov = s2 * np.linalg.inv(X.T @ X)
    a, b = coef
    g = np.array([-1 / b, a / b**2])
    return {"nu_c": float(-a / b), "se": float(np.sqrt(max(g @ cov @ g, 0.0))),
            "slope": float(b)}


def stable_r(beta, normalization, nu, r_max=0.99, M=120):
    r"""The order parameter of the stable stationary state at ν on S¹ (derived): 0 above the
    branch's largest ν (the turning point, or ν_c if the branch is supercritical), else the
    r > r_turn where :func:`stationary_branch` ν(r) = ν (linear interpolation on M points)."""
    rv, nub = _branch(float(beta), normalization, float(r_max), int(M))
    i = int(np.argmax(nub))
    if nu >= nub[i]:
        return 0.0
    tail_r, tail_nu = rv[i:], nub[i:]
    if nu < tail_nu.min():
        return float("nan")
    return float(np.interp(nu, tail_nu[::-1], tail_r[::-1]))


@functools.lru_cache(maxsize=16)
def _branch(beta, normalization, r_max, M):
    rv = np.linspace(0.005, r_max, M)
    nub = stationary_branch(beta, normalization, rv)
    ok = np.isfinite(nub)
    return rv[ok], nub[ok]


def _T_for(rate, eps, cap, Tmax):
    """A run long enough for the amplitude to reach ``cap`` (or ``Tmax``)."""
    if rate <= 0:
        return Tmax
    return float(min(Tmax, np.log(cap / eps) / rate))


def _cfg(base, **keys):
    c = copy.deepcopy(base)
    for k, v in keys.items():
        sec, name = k.split("__")
        c.setdefault(sec, {})[name] = v
    return c


def _no_mode(c):
    """Drop the perturbation keys of the ``uniform_mode`` start (another start is used)."""
    for key in ("mode", "amplitude"):
        c["init"].pop(key, None)
    return c


def _particles(c):
    """A density configuration made a particle one: no perturbation keys, no mesh, no tokens
    stored."""
    _no_mode(c)
    c.pop("density")
    c["output"]["store_tokens"] = False
    return c


def _steps(c, T, nsteps):
    """Set T and Δt = T/nsteps (T rounded to 3 significant digits)."""
    T = float(f"{T:.3g}")
    c["solver"]["T"] = T
    c["solver"]["dt"] = T / nsteps
    c["solver"]["record_every"] = max(1, nsteps // 100)
    return c


@register_study
class Uniform(Study):
    """Growth rates of the uniform state's modes, ν_c and the transition (S¹; S² coarse)."""

    name = "uniform"
    question = ("is the uniform state unstable, which mode wins, where is the critical noise "
                "nu_c and is the transition continuous (frozen D = V = I, ascent)?")
    quick = ("S1, N = 64, head and none at beta = 2, k = 1..3, nu_c of head, a three-link "
             "continuation: measured rates and nu_c match the derived ones")
    summary_columns = ()

    def params(self, scale):
        if scale == "quick":
            return dict(N=64, norms=("head", "none"), betas=(2.0,), ks=(1, 2, 3),
                        check=("head", 2.0), crit=(("head", 2.0),), steps=200, crit_T=20.0,
                        sweep=(("head", 2.0),), sweep_f=(0.7,), sweep_T=20.0,
                        particles=False, sphere=False, s2crit=(), s2part=(),
                        hyst=(("none", 1.0, 2, 32, 0.2, (0.7, 1.3), 20.0),))
        return dict(N=128, norms=("head", "none"), betas=(1.0, 2.0, 4.0, 8.0), ks=tuple(range(1, 9)),
                    check=("head", 4.0), crit=tuple((nm, b) for nm in ("head", "none")
                                                    for b in (1.0, 4.0)),
                    steps=400, crit_T=60.0, sweep=(("head", 1.0), ("none", 1.0), ("none", 4.0)),
                    sweep_f=(0.5, 0.7, 0.85, 0.95, 1.02, 1.05, 1.1, 1.2), sweep_T=100.0,
                    particles=True, sphere=True,
                    # S² ν_c: (norm, β) at N cells, Δt/2 at the middle N
                    s2crit=(("head", 2.0), ("head", 8.0)), s2crit_N=(250, 500, 1000),
                    s2crit_T=60.0,
                    # S² particles beside the density: (norm, β, ν/ν_c)
                    s2part=tuple(("head", 2.0, f) for f in (0.8, 0.9, 1.1)),
                    # continuation sweeps: (norm, β, d, N, Δt, ν/ν_c up, T_max)
                    hyst=(("none", 1.0, 2, 64, 0.2, HYST_F, 1000.0),
                          ("none", 4.0, 2, 64, 0.08, HYST_F4, 1000.0),
                          ("none", 4.0, 2, 32, 0.08, HYST_F4, 1000.0),
                          ("head", 8.0, 2, 64, 0.2, HYST_F, 3000.0),
                          # S², subcritical for none above β_* = 1.8162 (a wide window)
                          ("none", 4.0, 3, 250, 0.05, HYST_F_S2, 1000.0),
                          ("none", 4.0, 3, 500, 0.05, HYST_F_S2, 1000.0)))

    def base(self, scale):
        c = copy.deepcopy(UNIFORM_BASE)
        c["density"]["cells"] = self.params(scale)["N"]
        return c

    def variants(self, base, scale):
        p = self.params(scale)
        tasks = []
        eps = base["init"]["amplitude"]

        def add(name, c):
            tasks.append((name, _config.validate(c)))

        # (a) growth rates without noise
        for nm in p["norms"]:
            for b in p["betas"]:
                if nm == "none" and b > 4.0:
                    continue  # rates ~ e^beta: too stiff to be worth the steps
                for k in p["ks"]:
                    lam = float(derived_rate(k, b, nm))
                    T = _T_for(lam, eps, A_CAP, 40.0)
                    variants = [("", {})]
                    if (nm, b) == p["check"]:
                        variants += [("-halfN", {"density__cells": p["N"] // 2}),
                                     ("-halfdt", {"steps": 2})]
                    for tag, extra in variants:
                        extra = dict(extra)
                        mult = extra.pop("steps", 1)
                        c = _cfg(base, model__normalization=nm, model__beta=b, init__mode=k,
                                 **extra)
                        _steps(c, T, p["steps"] * mult)
                        add(f"growth-{nm}-b{b:g}-k{k}{tag}", c)
        # (b) nu_c: mode 1 around the derived nu_c
        for nm, b in p["crit"]:
            nuc = critical_nu(b, nm)
            for dl in DELTAS:
                nu = nuc * (1 + dl)
                T = min(p["crit_T"], 4.0 / abs(dl * nuc))
                for mult, tag in ((1, ""), (2, "-halfdt")):
                    c = _cfg(base, model__normalization=nm, model__beta=b, model__diffusion=nu,
                             init__mode=1, init__amplitude=1e-3,
                             density__diffusion_scheme="split")
                    _steps(c, T, mult * p["steps"] // 2)
                    add(f"critical-{nm}-b{b:g}-d{dl:+g}{tag}", c)
        # (b) the sweep: near-uniform and clustered starts
        for nm, b in p["sweep"]:
            nuc = critical_nu(b, nm)
            for f in p["sweep_f"]:
                for start, ini in (("uniform", {"init__tokens": "uniform_mode", "init__mode": 1,
                                                "init__amplitude": 0.05}),
                                   ("clustered", {"init__tokens": "vmf", "init__kappa": 10.0})):
                    c = _cfg(base, model__normalization=nm, model__beta=b,
                             model__diffusion=nuc * f, density__diffusion_scheme="split", **ini)
                    if start == "clustered":
                        _no_mode(c)
                    T = p["sweep_T"]
                    if nm == "none" and b > 2.0:
                        # fields ~ I_0(beta): the transport's CFL substeps cost ~ e^beta;
                        # N/2 cells and a shorter T (rates ~ nu_c are larger too)
                        c["density"]["cells"] = base["density"]["cells"] // 2
                        T = 0.4 * T
                    _steps(c, T, 5 * p["steps"] // 4)
                    add(f"sweep-{nm}-b{b:g}-f{f:g}-{start}", c)
                if p["particles"] and nm == "head":
                    c = _cfg(base, model__normalization=nm, model__beta=b, model__diffusion=nuc * f,
                             model__n=512, init__tokens="uniform", init__per_path_tokens=True,
                             solver__representation="particles", solver__method="euler",
                             solver__paths=4, diagnostics__clustering=True)
                    _particles(c)
                    _steps(c, p["sweep_T"] / 2, 1200)
                    add(f"particles-{nm}-b{b:g}-f{f:g}", c)
        # (a) cluster count of particles at large beta, nu = 0
        if p["particles"]:
            for b in (4.0, 9.0, 16.0, 25.0):
                lam = float(np.max(derived_rate(np.arange(1, 40), b, "head")))
                c = _cfg(base, model__beta=b, model__n=512, init__tokens="uniform",
                         init__per_path_tokens=True, solver__representation="particles",
                         solver__method="euler", solver__paths=4, diagnostics__clustering=True)
                _particles(c)
                _steps(c, 12.0 / lam, 600)
                add(f"clusters-head-b{b:g}", c)
        # S^2 coarse: head, degrees 1..3
        if p["sphere"]:
            for b in (2.0, 8.0):
                for ell in (1, 2, 3):
                    lam = float(derived_rate(ell, b, "head", d=3))
                    for Ns, tag in ((500, ""), (250, "-N250"), (1000, "-N1000")):
                        T = _T_for(lam, eps, A_CAP, 40.0)
                        for start in ("mode", "ref"):
                            c = _cfg(base, model__d=3, model__beta=b, init__mode=ell,
                                     density__cells=Ns)
                            if start == "ref":  # the uniform start on the same mesh and steps
                                c["init"]["tokens"] = "uniform"
                                _no_mode(c)
                            _steps(c, T, 200)
                            add(f"sphere{'ref' if start == 'ref' else ''}-head-b{b:g}-l{ell}{tag}",
                                c)
        # S² nu_c: degree 1 around the derived nu_c, each run paired with its uniform start
        for nm, b in p["s2crit"]:
            nuc = critical_nu(b, nm, d=3)
            for Ns in p["s2crit_N"]:
                mults = ((1, ""), (2, "-halfdt")) if Ns == p["s2crit_N"][1] else ((1, ""),)
                for dl in DELTAS:
                    T = min(p["s2crit_T"], 4.0 / abs(dl * nuc))
                    for mult, tag in mults:
                        for ref in (False, True):
                            c = _cfg(base, model__d=3, model__normalization=nm, model__beta=b,
                                     model__diffusion=nuc * (1 + dl), init__mode=1,
                                     init__amplitude=1e-3, density__cells=Ns,
                                     density__diffusion_scheme="split")
                            if ref:
                                c["init"]["tokens"] = "uniform"
                                _no_mode(c)
                            _steps(c, T, mult * p["steps"] // 2)
                            add(f"s2crit{'ref' if ref else ''}-{nm}-b{b:g}-N{Ns}-d{dl:+g}{tag}",
                                c)
        # S² particles beside the density (clustered start, N = 500)
        for nm, b, f in p["s2part"]:
            nu = critical_nu(b, nm, d=3) * f
            T = plateau_T(nu, b, nm, d=3, t_max=200.0)
            c = _cfg(base, model__d=3, model__normalization=nm, model__beta=b,
                     model__diffusion=nu, init__tokens="vmf", init__kappa=10.0,
                     density__cells=500, density__diffusion_scheme="split")
            _no_mode(c)
            _steps(c, T, int(round(T / 0.2)))
            add(f"s2dens-{nm}-b{b:g}-f{f:g}", c)
            if f < 1:  # the mesh dependence of the clustered state (upwind diffusion)
                for Ns in (250, 1000):
                    c2 = copy.deepcopy(c)
                    c2["density"]["cells"] = Ns
                    add(f"s2dens-{nm}-b{b:g}-f{f:g}-N{Ns}", c2)
            c = _cfg(base, model__d=3, model__normalization=nm, model__beta=b,
                     model__diffusion=nu, model__n=512, init__tokens="uniform",
                     init__per_path_tokens=True, solver__representation="particles",
                     solver__method="euler", solver__paths=4, diagnostics__clustering=True)
            _particles(c)
            _steps(c, T, int(round(T / 0.05)))
            add(f"s2part-{nm}-b{b:g}-f{f:g}", c)
        return tasks

    def chains(self, base, scale):
        r"""The continuation sweeps [model §6c]: per (norm, β, d, N), ν stepped up through
        ν_c (ν/ν_c in the given list) and back down, every link started from the final
        density of the one before, times :math:`1 + \varepsilon\varphi_1` (``KICK``, see
        :meth:`continue_from`); link time :func:`plateau_T`; the first link starts from
        ``uniform_mode`` 1 with ε = 0.05."""
        out = []
        for nm, b, d, N, dt, fs, tmax in self.params(scale)["hyst"]:
            nuc = critical_nu(b, nm, d)
            steps = [("up", f) for f in fs] + [("down", f) for f in fs[-2::-1]]
            chain = []
            for i, (way, f) in enumerate(steps):
                c = _cfg(base, model__d=d, model__normalization=nm, model__beta=b,
                         model__diffusion=nuc * f, density__cells=N,
                         density__diffusion_scheme="split", init__tokens="uniform_mode",
                         init__mode=1, init__amplitude=0.05 if i == 0 else KICK)
                T = plateau_T(nuc * f, b, nm, d, t_max=tmax, grow=(way == "down"))
                n = max(1, int(np.ceil(T / dt)))
                c["solver"].update(T=float(n * dt), dt=dt, record_every=max(1, n // 100))
                chain.append((f"hyst-{nm}-b{b:g}-d{d}-N{N}-{i:02d}{way}-f{f:g}",
                              _config.validate(c)))
            out.append(chain)
        return out

    def continue_from(self, previous, config):
        r"""The previous link's final density times :math:`1 + \xi`, ξ the ``uniform_mode``
        perturbation of the link's ``[init]`` (mode 1, ε = ``KICK``) at the cell centres,
        rescaled to mass 1: a fixed seed for a linearly unstable uniform state (a
        deterministic solver would otherwise leave it only from round-off, after a delay
        that grows as the sweep decays the mode further: dynamic, not stationary,
        hysteresis); a stable state forgets it at rate :math:`\lvert\lambda_1\rvert`."""
        from wflow.geometry.circle_fv import CircleGrid
        from wflow.geometry.sphere_mesh import voronoi_mesh
        from wflow.model.density import perturbation

        rho = final_state(previous)
        ini = config["init"]
        if config["solver"]["representation"] != "density" or ini["tokens"] != "uniform_mode":
            return rho
        d, N = int(config["model"]["d"]), int(config["density"]["cells"])
        if d == 2:
            grid = CircleGrid(N)
            xi = perturbation(ini, 2)(grid.theta)
        else:
            grid = voronoi_mesh(N, lloyd=int(config["density"]["lloyd"]))
            xi = perturbation(ini, 3)(grid.centres)
        rho = rho * (1.0 + xi)
        return rho / grid.masses(rho).sum(axis=-1, keepdims=True)

    # ------------------------------------------------------------------ data
    @staticmethod
    def measure(data):
        """Per task: the configuration keys and the measured statistic."""
        out = {}
        meshes = {}
        refs = {name: path for path, (name, _) in zip(data.paths, data.tasks)
                if name.startswith(("sphereref", "s2critref"))}
        for path, (name, _) in zip(data.paths, data.tasks):
            if name in refs:
                continue
            cfg, arr = load_source(path)
            m, ini, s = cfg["model"], cfg["init"], cfg["solver"]
            t = np.asarray(arr["t"], dtype=float)
            rec = {"norm": m["normalization"], "beta": float(m["beta"]), "nu": float(m["diffusion"]),
                   "d": int(m["d"]), "dt": float(s["dt"]), "T": float(s["T"])}
            if name.startswith(("growth", "critical", "sphere", "s2crit")):
                rho = np.asarray(arr["rho"], dtype=float)[:, 0]
                k = int(ini["mode"])
                mesh = ref = None
                if rec["d"] == 3:
                    from wflow.geometry.sphere_mesh import voronoi_mesh

                    N = rho.shape[-1]
                    mesh = meshes.setdefault(N, voronoi_mesh(N))
                    rpath = refs.get(name.replace("sphere-", "sphereref-", 1)
                                     .replace("s2crit-", "s2critref-", 1))
                    if rpath is not None:
                        ref = np.asarray(load_source(rpath)[1]["rho"], dtype=float)[:, 0]
                A = mode_amplitude(rho, k, rec["d"], mesh, ref)
                rate, se, npts = fit_rate(t, A, other=other_amplitude(rho, k, rec["d"], mesh, ref))
                rec.update(k=k, N=rho.shape[-1], rate=rate, se=se, npts=npts, t=t, A=A,
                           derived=float(derived_rate(k, rec["beta"], rec["norm"], rec["nu"],
                                                      rec["d"])))
            elif name.startswith("sweep"):
                rho = np.asarray(arr["rho"], dtype=float)[:, 0]
                r = order_parameter(rho)
                i8 = int(np.argmin(np.abs(t - 0.8 * t[-1])))
                rec.update(start=name.rsplit("-", 1)[1], r=float(r[-1]), drift=float(r[-1] - r[i8]),
                           t=t, rt=r)
            elif name.startswith(("hyst", "s2dens")):
                rho = np.asarray(arr["rho"], dtype=float)[:, 0]
                mesh = None
                if rec["d"] == 3:
                    from wflow.geometry.sphere_mesh import voronoi_mesh

                    N = rho.shape[-1]
                    mesh = meshes.setdefault(N, voronoi_mesh(N))
                r = order_parameter(rho, mesh)
                i8 = int(np.argmin(np.abs(t - 0.8 * t[-1])))
                drift = float(r[-1] - r[i8])
                rec.update(N=rho.shape[-1], r=float(r[-1]), drift=drift, t=t, rt=r,
                           stationary=bool(abs(drift) < DRIFT_TOL
                                           and drift <= GROWTH_TOL * float(r[-1])))
                if name.startswith("hyst"):
                    nuc = critical_nu(rec["beta"], rec["norm"], rec["d"])
                    rec.update(chain=name.rsplit("-", 2)[0], way=name.rsplit("-", 2)[1][2:],
                               step=int(name.rsplit("-", 2)[1][:2]), nu_c=nuc,
                               derived=(stable_r(rec["beta"], rec["norm"], rec["nu"])
                                        if rec["d"] == 2 else
                                        stationary_r_s2(rec["beta"], rec["norm"], rec["nu"])))
            else:  # particles
                op = np.asarray(arr["order_parameter"], dtype=float)
                nc = np.asarray(arr["n_clusters"], dtype=float)
                rec.update(r=op[-1], nclusters=nc[-1], t=t, rt=op.mean(axis=1),
                           nct=nc.mean(axis=1))
            out[name] = rec
        return out

    # ------------------------------------------------------------------ summary
    def summarize(self, data):
        """Tables: growth rates (measured ± SE vs derived, discretisation check), ν_c, the
        sweep's branches, particles and S²."""
        ms = self.measure(data)
        lines = ["Uniform state [model §6c]: frozen D = V = I, H = 1, ascent. Rates from the "
                 f"linear phase (A_k <= {A_CAP:g}), ± one standard error of the slope."]
        table = {k: [] for k in ("task", "norm", "d", "beta", "nu", "k", "N", "dt", "measured",
                                 "se", "derived", "r", "drift")}

        def row(name, rec):
            for col, v in zip(table, (name, rec["norm"], rec["d"], rec["beta"], rec["nu"],
                                      rec.get("k", 0), rec.get("N", 0), rec["dt"],
                                      rec.get("rate", np.nan), rec.get("se", np.nan),
                                      rec.get("derived", np.nan), np.mean(rec.get("r", np.nan)),
                                      rec.get("drift", np.nan))):
                table[col].append(v)

        for name, rec in ms.items():
            row(name, rec)
        g = {n: r for n, r in ms.items() if n.startswith("growth")}
        lines += ["", "(a) growth rates without noise, S1",
                  f"{'norm':>5}{'beta':>6}{'k':>3}{'N':>5}{'measured':>12}{'se':>10}"
                  f"{'derived':>12}{'rel.diff':>10}"]
        for n, r in g.items():
            if n.endswith(("halfN", "halfdt")):
                continue
            lines.append(f"{r['norm']:>5}{r['beta']:>6g}{r['k']:>3}{r['N']:>5}{r['rate']:>12.5f}"
                         f"{r['se']:>10.1e}{r['derived']:>12.5f}"
                         f"{(r['rate'] - r['derived']) / r['derived']:>10.1e}")
        lines += ["", "winning mode k* = argmax_k lambda_k (derived; measured among the k run)"]
        for nm in sorted({r["norm"] for r in g.values()}):
            for b in sorted({r["beta"] for r in g.values() if r["norm"] == nm}):
                rs = [r for n, r in g.items() if r["norm"] == nm and r["beta"] == b
                      and not n.endswith(("halfN", "halfdt"))]
                km = max(rs, key=lambda r: r["rate"])["k"]
                lines.append(f"  {nm:>5} beta = {b:g}: derived k* = {winning_mode(b, nm)}, "
                             f"measured k* = {km}")
        lines += ["", "discretisation check: rate(N) - rate(N/2), rate(dt) - rate(dt/2)"]
        for n, r in g.items():
            for tag in ("halfN", "halfdt"):
                if n.endswith(tag):
                    r0 = g[n[: -len(tag) - 1]]
                    lines.append(f"  {r0['norm']} beta = {r0['beta']:g} k = {r0['k']}: {tag}: "
                                 f"{r0['rate'] - r['rate']:+.2e}  (rate {r0['rate']:.5f}, "
                                 f"derived - measured {r0['derived'] - r0['rate']:+.2e})")
        crit = self.critical(ms)
        lines += ["", "(b) critical noise nu_c (mode 1: rates at nu_c(1+delta), linear fit, "
                  "zero crossing ± delta-method SE)"]
        for (nm, b), c in crit.items():
            lines.append(f"  {nm:>5} beta = {b:g}: measured {c['nu_c']:.5f} ± {c['se']:.1e}, "
                         f"derived {c['derived']:.5f}, slope {c['slope']:.4f} (derived -1)")
            if "nu_c_halfdt" in c:
                lines.append(f"        dt/2: {c['nu_c_halfdt']:.5f}, Richardson (order 2): "
                             f"{c['nu_c_richardson']:.5f} (derived - Richardson "
                             f"{c['derived'] - c['nu_c_richardson']:+.1e})")
        sw = {n: r for n, r in ms.items() if n.startswith("sweep")}
        if sw:
            lines += ["", "sweep: stationary r = |<e^{i theta}>| at T from a near-uniform and a "
                      "clustered start (drift: r(T) - r(0.8 T)); derived branch r(nu)"]
            for key in sorted({(r["norm"], r["beta"]) for r in sw.values()}):
                nuc = critical_nu(key[1], key[0])
                lines.append(f"  {key[0]} beta = {key[1]:g} (nu_c = {nuc:.4f})")
                for nu in sorted({r["nu"] for r in sw.values() if (r["norm"], r["beta"]) == key}):
                    pair = {r["start"]: r for r in sw.values()
                            if (r["norm"], r["beta"], r["nu"]) == (*key, nu)}
                    u, c = pair.get("uniform"), pair.get("clustered")
                    lines.append(f"    nu/nu_c = {nu / nuc:5.3f}: r uniform start {u['r']:.4f} "
                                 f"(drift {u['drift']:+.1e}), clustered start {c['r']:.4f} "
                                 f"(drift {c['drift']:+.1e})")
            lines.append(f"  none: continuous for beta < {landau_beta_none():.4f} "
                         "(I_2 = I_1/2), discontinuous above")
        pa = {n: r for n, r in ms.items() if n.startswith("particles")}
        if pa:
            lines += ["", "particles n = 512 (4 paths), r at T/2 of the density sweep, mean "
                      "[95% CI over paths]"]
            for n, r in pa.items():
                iv = mean_interval(r["r"], unit="paths")
                lines.append(f"  {n}: r = {iv.fmt('.4f')}")
        cl = {n: r for n, r in ms.items() if n.startswith("clusters")}
        if cl:
            lines += ["", "particles n = 512, nu = 0, head: clusters at t = 12/lambda_max "
                      "(cluster_angle 0.1) against k*"]
            for r in cl.values():
                iv = mean_interval(r["nclusters"], unit="paths")
                lines.append(f"  beta = {r['beta']:g}: clusters {iv.fmt('.3g')}, "
                             f"k* = {winning_mode(r['beta'], 'head')}")
        sp = {n: r for n, r in ms.items() if n.startswith("sphere")}
        if sp:
            lines += ["", "S2 coarse (Voronoi N cells, first-order upwind), head: rate of degree l"]
            for r in sp.values():
                lines.append(f"  beta = {r['beta']:g} l = {r['k']} N = {r['N']}: measured "
                             f"{r['rate']:.5f} ± {r['se']:.1e}, derived {r['derived']:.5f} "
                             f"(rel. diff {(r['rate'] - r['derived']) / r['derived']:+.1e})")
        lines += self._summary_s2(ms) + self._summary_hysteresis(ms)
        return "\n".join(lines), table

    @staticmethod
    def _summary_s2(ms):
        lines = []
        cr = Uniform.critical_s2(ms)
        if cr:
            lines += ["", "S2 nu_c (head, degree 1, Voronoi N cells; rates at nu_c(1+delta), "
                      "zero crossing ± delta-method SE; derived i_1/(beta i_0))"]
            for (nm, b), c in cr.items():
                for N, v in c["by_N"].items():
                    lines.append(f"  {nm} beta = {b:g} N = {N:>4}: {v['nu_c']:.5f} ± "
                                 f"{v['se']:.1e} (slope {v['slope']:.4f}, derived -2), "
                                 f"rel. diff {(v['nu_c'] - c['derived']) / c['derived']:+.2e}")
                    if "nu_c_halfdt" in v:
                        lines.append(f"      dt/2: {v['nu_c_halfdt']:.5f} (change "
                                     f"{v['nu_c_halfdt'] - v['nu_c']:+.1e})")
                if "order" in c:
                    lines.append(f"    observed order in 1/N: p = {c['order']:.2f}; "
                                 f"extrapolated (p observed) {c['extrap']:.5f}, (p = 1) "
                                 f"{c['extrap1']:.5f}; derived {c['derived']:.5f}")
                if "extrap1_dt" in c:
                    lines.append(f"    Delta t bias at N = {sorted(c['by_N'])[1]} (4/3 of the "
                                 f"dt/2 change): {c['dt_bias']:+.1e}; p = 1 extrapolation + it: "
                                 f"{c['extrap1_dt']:.5f} (rel. diff "
                                 f"{(c['extrap1_dt'] - c['derived']) / c['derived']:+.1e})")
        dens = {n: r for n, r in ms.items() if n.startswith("s2dens")}
        part = {n: r for n, r in ms.items() if n.startswith("s2part")}
        if part:
            lines += ["", "S2 particles (n = 512, 4 paths, |mean x| at T, mean [95% CI]) beside "
                      "the density (N = 500, clustered start, |sum m_j c_j| at T, drift)"]
            for n, r in part.items():
                dn = dens.get(n.replace("s2part", "s2dens", 1))
                nuc = critical_nu(r["beta"], r["norm"], 3)
                iv = mean_interval(r["r"], unit="paths")
                der = stationary_r_s2(r["beta"], r["norm"], r["nu"])
                lines.append(f"  {r['norm']} beta = {r['beta']:g} nu/nu_c = {r['nu'] / nuc:.2f} "
                             f"T = {r['T']:g}: derived {der:.4f}, particles {iv.fmt('.4f')}"
                             + (f", density N = 500 {dn['r']:.4f} (drift {dn['drift']:+.1e})"
                                if dn else ""))
                for Ns in (250, 1000):
                    dN = dens.get(n.replace("s2part", "s2dens", 1) + f"-N{Ns}")
                    if dN:
                        lines.append(f"      density N = {Ns}: {dN['r']:.4f} "
                                     f"(drift {dN['drift']:+.1e})")
        return lines

    @staticmethod
    def _summary_hysteresis(ms):
        hy = {n: r for n, r in ms.items() if n.startswith("hyst")}
        if not hy:
            return []
        lines = ["", "continuation sweeps: nu up through nu_c and back down, each link from the "
                 f"previous final density times (1 + {KICK:g} cos theta); T = min(T_max, max("
                 f"{T_MIN:g}, c/|lambda_1|)), c = {C_RELAX:g}, down below nu_c "
                 f"{C_RELAX + np.log(1 / KICK):.1f}; r at T ('*': not stationary, "
                 f"|r(T) - r(0.8T)| >= {DRIFT_TOL:g} or a growth above {GROWTH_TOL:g} r(T)); "
                 "derived: the stable stationary r"]
        for chain in dict.fromkeys(r["chain"] for r in hy.values()):
            rs = [r for r in hy.values() if r["chain"] == chain]
            r0 = rs[0]
            nuc = critical_nu(r0["beta"], r0["norm"], r0["d"])
            lines.append(f"  {chain} (nu_c = {nuc:.5f}, dt = {r0['dt']:g})")
            lines.append(f"    {'nu/nu_c':>8}{'T up':>8}{'r up':>10}{'T down':>8}{'r down':>10}"
                         f"{'derived':>10}")
            for f in sorted({round(r["nu"] / nuc, 6) for r in rs}):
                pair = {r["way"]: r for r in rs if abs(r["nu"] / nuc - f) < 1e-6}

                def cell(w, pair=pair):
                    r = pair.get(w)
                    if r is None:
                        return f"{'':>8}{'':>10}"
                    star = " " if r["stationary"] else "*"
                    return f"{r['T']:>8.0f}{r['r']:>9.4f}{star}"

                der = (stable_r(r0["beta"], r0["norm"], f * nuc) if r0["d"] == 2
                       else stationary_r_s2(r0["beta"], r0["norm"], f * nuc))
                lines.append(f"    {f:>8.3f}{cell('up')}{cell('down')}{der:>10.4f}")
        return lines

    @staticmethod
    def critical_s2(ms):
        r"""``{(norm, β): {"by_N": {N: {"nu_c", "se", "slope"[, "nu_c_halfdt"]}}, "derived",
        "order", "extrap", "extrap1"}}`` of the S² critical runs; with three N in ratio 2,
        the observed order :math:`p = \log_2\frac{\nu(N_1) - \nu(N_2)}{\nu(N_2) -
        \nu(N_3)}` in 1/N and the Richardson values
        :math:`\nu(N_3) + (\nu(N_3) - \nu(N_2))/(2^p - 1)` (p observed, and p = 1);
        with the Δt/2 runs at :math:`N_2`, ``dt_bias`` = 4/3 (ν(Δt/2) − ν(Δt)) (order 2) and
        ``extrap1_dt`` = the p = 1 value plus it (the Δt error taken as independent of N)."""
        groups = {}
        for n, r in ms.items():
            if n.startswith("s2crit"):
                key = (r["norm"], r["beta"], r["N"], n.endswith("halfdt"))
                groups.setdefault(key, []).append(r)
        out = {}
        for (nm, b, N, half), rs in sorted(groups.items()):
            z = _zero_crossing(rs)
            c = out.setdefault((nm, b), {"by_N": {}, "derived": critical_nu(b, nm, 3)})
            if half:
                c["by_N"].setdefault(N, {})["nu_c_halfdt"] = z["nu_c"]
            else:
                c["by_N"].setdefault(N, {}).update(z)
        for c in out.values():
            Ns = sorted(c["by_N"])
            if len(Ns) == 3 and Ns[1] == 2 * Ns[0] and Ns[2] == 2 * Ns[1]:
                v = [c["by_N"][N]["nu_c"] for N in Ns]
                q = (v[0] - v[1]) / (v[1] - v[2])
                p = float(np.log2(q)) if q > 0 else float("nan")
                c.update(order=p, extrap=v[2] + (v[2] - v[1]) / (2**p - 1),
                         extrap1=v[2] + (v[2] - v[1]))
                half = c["by_N"][Ns[1]].get("nu_c_halfdt")
                if half is not None:  # the Δt bias at the middle N, order 2, taken as N-free
                    c["dt_bias"] = 4.0 / 3.0 * (half - v[1])
                    c["extrap1_dt"] = c["extrap1"] + c["dt_bias"]
        return out

    @staticmethod
    def critical(ms):
        r"""``{(norm, β): {"nu_c", "se", "slope", "derived"}}``: the least-squares line
        rate = a + b ν through the critical runs; :math:`\nu_c = -a/b`, SE by the delta
        method from the fit's covariance."""
        groups = {}
        for n, r in ms.items():
            if n.startswith("critical"):
                key = (r["norm"], r["beta"]) + (("halfdt",) if n.endswith("halfdt") else ())
                groups.setdefault(key, []).append(r)
        out = {}
        for key, rs in groups.items():
            out[key] = {**_zero_crossing(rs), "derived": critical_nu(key[1], key[0])}
        for key in [k for k in out if len(k) == 2 and k + ("halfdt",) in out]:
            # Heun: the rate's error is O(Δt²); Richardson from Δt and Δt/2
            a, h = out[key]["nu_c"], out[key + ("halfdt",)]["nu_c"]
            out[key]["nu_c_halfdt"] = h
            out[key]["nu_c_richardson"] = h + (h - a) / 3
        return {k: v for k, v in out.items() if len(k) == 2}

    def figures(self, data, outdir, formats):
        from wflow.figures import uniform as _fig

        ms = self.measure(data)
        branches = {}
        for n, r in ms.items():
            if n.startswith("sweep") or (n.startswith("hyst") and r["d"] == 2):
                key = (r["norm"], r["beta"])
                if key not in branches:
                    rv = np.linspace(0.01, 0.95, 60)
                    branches[key] = (rv, stationary_branch(key[1], key[0], rv),
                                     critical_nu(key[1], key[0]))
        curves = {}
        for nm in ("head", "none"):
            for b in sorted({r["beta"] for r in ms.values() if r["norm"] == nm}):
                ks = np.arange(1, 13)
                curves[(nm, b)] = (ks, derived_rate(ks, b, nm))
        return _fig.plot_uniform(ms, curves, branches, self.critical(ms), outdir, formats,
                                 critical_s2=self.critical_s2(ms))
