r"""The uniform state of the frozen ascent flow: its modes' growth rates, the critical noise,
the stationary branches, and the amplitudes that measure them [model §6c].

Setting: one head, frozen :math:`D = V = I`, ascent (σ = +1), normalisation ``head`` (SA) or
``none`` (USA), token diffusion ν. The uniform density :math:`\bar\rho = 1/\lvert
S^{d-1}\rvert` is an equilibrium, and :math:`\bar\rho(1 + a\,\varphi_k)` (:math:`\varphi_k =
\cos k\theta` on S¹, a spherical harmonic of degree ℓ on S²) grows at

.. math:: \lambda_k = k^2\Big(\frac{I_k(\beta)}{\beta\,c} - \nu\Big),\qquad
          \lambda_\ell = \ell(\ell+1)\Big(\frac{i_\ell(\beta)}{\beta\,c} - \nu\Big),\qquad
          c = I_0(\beta),\ i_0(\beta)\ (\texttt{head}),\ 1\ (\texttt{none}),

so the uniform state is linearly unstable for :math:`\nu < \nu_c = I_1(\beta)/(\beta c)`
(S²: :math:`i_1(\beta)/(\beta c)`).

Derived: :func:`derived_rate`, :func:`critical_nu`, :func:`winning_mode`, the Landau
coefficient of ``none`` on S¹ (:func:`landau_coefficient`, its zero :func:`landau_beta_none`)
and the stationary non-uniform states (:func:`stationary_branch`, :func:`stable_r` on S¹,
:func:`stationary_r_s2`). Measured on cell averages: :func:`mode_amplitude`,
:func:`other_amplitude`, :func:`order_parameter`, and the rate of the linear phase
:func:`fit_rate`.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import optimize, special

from wflow.model.density import real_harmonic

__all__ = ["kernel_coefficient", "mode_eigenvalue", "derived_rate", "critical_nu",
           "winning_mode", "landau_coefficient", "landau_beta_none", "stationary_branch",
           "branch_points", "stable_r", "stationary_r_s2", "mode_amplitude", "other_amplitude",
           "order_parameter", "fit_rate", "A_CAP", "Q_CAP", "power_rates"]

#: the linear phase: records with the relative amplitude at most this (:func:`fit_rate`)
A_CAP = 1e-2
#: the linear phase of particles: records with the power per component relative to a point
#: mass at most this in every degree (:func:`power_rates`)
Q_CAP = 1e-3


# ---------------------------------------------------------------------------- derived
def kernel_coefficient(ell, beta, d=2):
    r"""The kernel's coefficient on mode ℓ: :math:`I_\ell(\beta)` on S¹ (d = 2),
    :math:`i_\ell(\beta) = \sqrt{\pi/(2\beta)}\,I_{\ell+1/2}(\beta)` on S² (d = 3).

    .. math:: \frac1{2\pi}\int_0^{2\pi} e^{\beta\cos\psi}\cos\ell\psi\,d\psi = I_\ell(\beta),
              \qquad \frac12\int_{-1}^{1} e^{\beta t}P_\ell(t)\,dt = i_\ell(\beta)

    (Funk–Hecke on S²) [model §6c].
    """
    if d == 2:
        return special.iv(ell, beta)
    return special.spherical_in(ell, beta)


def mode_eigenvalue(k, d=2):
    r""":math:`\mu_k = k^2` (S¹), :math:`\ell(\ell+1)` (S²): minus the Laplace–Beltrami
    eigenvalue of mode k [model §6c]."""
    return k * k if d == 2 else k * (k + 1)


def derived_rate(k, beta, normalization="head", nu=0.0, d=2):
    r"""Linear growth rate of mode k of the uniform state [model §6c].

    .. math:: \lambda_k = \mu_k\Big(\frac{c_k(\beta)}{\beta\,c_0^{\,s}} - \nu\Big),\qquad
              \mu_k = k^2\ (S^1),\ \ell(\ell+1)\ (S^2),

    :math:`c_k = I_k` (S¹), :math:`i_\ell` (S², modified spherical Bessel), s = 1 for
    ``head``, 0 for ``none``.

    Parameters
    ----------
    k : int or array of int
        The Fourier mode (S¹) or the degree (S²).
    beta : float
    normalization : {"head", "none"}
    nu : float
        The token diffusion.
    d : {2, 3}

    Returns
    -------
    float or array, the shape of ``k``.
    """
    k = np.asarray(k)
    c = kernel_coefficient(k, beta, d) / beta
    if normalization == "head":
        c = c / kernel_coefficient(0, beta, d)
    return mode_eigenvalue(k, d) * (c - nu)


def critical_nu(beta, normalization="head", d=2):
    r"""The critical noise [model §6c]:

    .. math:: \nu_c = \frac{c_1(\beta)}{\beta\,c_0^{\,s}},

    the largest ν with a growing mode (mode 1; :math:`c_k` decreases in k), notation of
    :func:`derived_rate`."""
    return float(derived_rate(1, beta, normalization, 0.0, d) / mode_eigenvalue(1, d))


def winning_mode(beta, normalization="head", kmax=60, d=2):
    r"""The fastest-growing mode at ν = 0 [model §6c]:

    .. math:: k^* = \arg\max_{1 \le k \le k_{\max}} \lambda_k(\beta)
              \quad(\approx\sqrt{2\beta} \text{ for large } \beta \text{ on } S^1).
    """
    ks = np.arange(1, kmax + 1)
    return int(ks[np.argmax(derived_rate(ks, beta, normalization, 0.0, d))])


def landau_coefficient(beta):
    r"""The Landau coefficient of the ``none`` branch on S¹ [model §6c]:

    .. math:: \frac{\nu}{\nu_c} - 1 = L(\beta)\,\alpha_1^2 + O(\alpha_1^4),\qquad
              L(\beta) = \frac{2I_2(\beta) - I_1(\beta)}{8\,(I_1(\beta) - I_2(\beta))},

    :math:`\alpha_1 = 2I_1 r/(\beta\nu)` (= 2r at ν = ν_c), r the order parameter of the
    stationary state near ν_c: the transition is continuous (supercritical) for L < 0,
    discontinuous (subcritical, a hysteresis window) for L > 0."""
    i1, i2 = special.iv(1, beta), special.iv(2, beta)
    return (2 * i2 - i1) / (8 * (i1 - i2))


def landau_beta_none():
    r"""The β where the ``none`` bifurcation on S¹ turns discontinuous: the zero of
    :func:`landau_coefficient`,

    .. math:: I_2(\beta_*) = \tfrac12 I_1(\beta_*),\qquad \beta_* = 2.4469\ldots

    (continuous below, subcritical above; [model §6c])."""
    return float(optimize.brentq(lambda b: special.iv(2, b) - 0.5 * special.iv(1, b), 0.1, 20))


def stationary_branch(beta, normalization, r_values, K=16, M=1024):
    r"""The derived non-uniform stationary states on S¹, parametrised by :math:`r = c_1`
    [model §6c].

    Stationary: :math:`\rho \propto e^{Z/(\beta\nu)}` (``none``),
    :math:`\rho \propto Z^{1/(\beta\nu)}` (``head``), with
    :math:`Z(\theta) = I_0 + 2\sum_k I_k(\beta)c_k\cos k\theta`, :math:`c_k = \int\rho\cos k\theta`
    (an even state). For each r the unknowns ν and :math:`c_2..c_K` solve
    :math:`c_k = \int\rho\cos k\theta`, k = 1..K (continuation in r; M-point midpoint rule).

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


def stable_r(beta, normalization, nu, r_max=0.99, M=120):
    r"""The order parameter of the stable stationary state at ν on S¹ (derived) [model §6c]:

    .. math:: r(\nu) = \begin{cases} 0 & \nu \ge \max_r \nu_b(r),\\
              \nu_b^{-1}(\nu) \text{ on } r > r_{\rm turn} & \text{else,}\end{cases}

    :math:`\nu_b` the branch of :func:`stationary_branch` (its largest ν is the turning point,
    or ν_c if the branch is supercritical); linear interpolation on M points of
    (0.005, ``r_max``); NaN below the branch's smallest ν."""
    rv, nub = branch_points(float(beta), normalization, float(r_max), int(M))
    i = int(np.argmax(nub))
    if nu >= nub[i]:
        return 0.0
    tail_r, tail_nu = rv[i:], nub[i:]
    if nu < tail_nu.min():
        return float("nan")
    return float(np.interp(nu, tail_nu[::-1], tail_r[::-1]))


@functools.lru_cache(maxsize=16)
def branch_points(beta, normalization, r_max, M):
    r"""The points :math:`(r, \nu_b(r))` of :func:`stationary_branch` on M values of r in
    (0.005, ``r_max``) where the solve converged (cached)."""
    rv = np.linspace(0.005, r_max, M)
    nub = stationary_branch(beta, normalization, rv)
    ok = np.isfinite(nub)
    return rv[ok], nub[ok]


def stationary_r_s2(beta, normalization, nu, M=200, iters=20000, tol=1e-12):
    r"""The order parameter :math:`r = \lvert\int x\rho\rvert` of the stable axisymmetric
    stationary state on S² (derived; 0 where the iteration falls to the uniform state)
    [model §6c].

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
    order); default the constant :math:`1/(4\pi)` [model §6c].
    ``rho`` is (..., N); returns (...).
    """
    rho = np.asarray(rho, dtype=float)
    if d == 2:
        N = rho.shape[-1]
        h = 2 * np.pi / N
        th = (np.arange(N) + 0.5) * h
        z = rho @ np.exp(-1j * k * th) * h
        return 2 * np.abs(z) / np.sinc(k * h / 2 / np.pi)
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


def power_rates(t, q, cap=Q_CAP):
    r"""The growth rate of every degree from the harmonic power of one path's tokens
    [model §6c, §8]: least squares of

    .. math:: \log q_\ell(t) = \log q_\ell(0) + 2\lambda_\ell t

    over the records from t = 0 up to the last one before any degree's :math:`q_\ell` exceeds
    ``cap`` (the linear phase of the whole cloud: past it the leading degrees feed every
    other one quadratically). :math:`q_\ell = 4\pi P_\ell/(2\ell+1)` (S¹: :math:`P_k`), the
    power per component relative to a point mass (:func:`wflow.model.harmonics.point_power`),
    starts near its uniform-draw mean 1/n; without token noise the empirical measure is a weak
    solution of the PDE, so each degree's coefficients grow at :math:`\lambda_\ell` from t = 0
    (the nonlinear terms are O(1/n) against the O(n^{-1/2}) linear ones).

    Parameters
    ----------
    t : (R,) array
    q : (R, L) array, degrees 1..L.
    cap : float

    Returns
    -------
    rate, se : (L,) arrays, the amplitude's rate λ (half the slope of log q) and its standard
    error (as :func:`fit_rate`); npts : the records used (NaN rates below 3).
    """
    t = np.asarray(t, dtype=float)
    q = np.asarray(q, dtype=float)
    over = np.any(~(q <= cap) | ~(q > 0), axis=1)
    stop = int(np.argmax(over)) if over.any() else len(t)
    L = q.shape[1]
    if stop < 3:
        return np.full(L, np.nan), np.full(L, np.nan), stop
    tt, y = t[:stop], np.log(q[:stop])
    coef, res, *_ = np.polyfit(tt, y, 1, full=True)
    s2 = res / (stop - 2) if len(res) else np.zeros(L)
    se = np.sqrt(np.maximum(s2, 0.0) / np.sum((tt - tt.mean()) ** 2))
    return coef[0] / 2, se / 2, stop
