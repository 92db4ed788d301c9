r"""The spectral representation of the density on :math:`S^1` and :math:`S^2` [model §5b,
"The spectral representation"].

The state is the vector of values :math:`\rho_g` (P, G) of a band-limited density (Fourier
degree K on S¹, harmonic degree L on S²) at the nodes :math:`x_g` of the dealiased quadrature
grid of :mod:`wflow.geometry.harmonics`, with quadrature weights :math:`\omega_g` and masses
:math:`m_g = \omega_g\rho_g`. The field at the nodes is the fused kernel's field of the
weighted points :math:`\{(x_g, m_g)\}` (the quadrature of every :math:`\int\cdot\,\rho\,dy`),
and

.. math::
    \dot\rho = P_L\big[-\operatorname{div}_S(\rho\,\sigma v)\big] + \nu\Delta_S\rho,\qquad
    \mathcal D_h = \sigma\sum_g\omega_g\Phi_g\dot\rho_g,\quad
    \Phi_g = \frac{1}{\beta H}\sum_h Z_h(x_g),

so that :math:`dE/dt = \sigma\mathcal D_h` exactly for frozen weights, with
:math:`E = \frac{1}{2\beta H}\sum_h\sum_{g,g'}m_g m_{g'}e^{\beta\langle x_g, D_h x_{g'}\rangle}`
the energy of the weighted points. The mass :math:`\sum_g m_g` is the degree-0 coefficient,
which no divergence changes: conserved to round-off. Positivity is not guaranteed: the grid
minimum is monitored (:attr:`SpectralDensityModel.positivity_tol`).

:func:`funk_hecke` gives the kernel's exact multipliers for :math:`D = cI` (the kernel
:math:`e^{\beta c\langle x, y\rangle}` is diagonal in the harmonics), the reference for the
quadrature.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from wflow.errors import ConfigError, NumericalError
from wflow.geometry.harmonics import CircleHarmonics, SphereHarmonics, harmonics
from wflow.model.attention import AttentionModel, Field, check_symmetric
from wflow.model.density import DensityField, perturbation, von_mises_density
from wflow.params import Choice, Integer, Interval, Param, When, bad, declare

__all__ = ["SpectralDensityModel", "initial_density", "funk_hecke", "funk_hecke_sums",
           "kernel_sums", "quadrature_field", "given_density", "REPRESENTATIONS",
           "POSITIVITY_TOL", "spectral_model"]

#: how a density is discretised: finite volumes or the spectral representation [model §5b]
REPRESENTATIONS = ("fv", "spectral")
#: the default monitor: the grid minimum of ρ may fall to −tol·max ρ [model §5b]
POSITIVITY_TOL = 1e-3


def funk_hecke(beta, degree, d, derivative=0):
    r"""The eigenvalues of :math:`f \mapsto \int e^{\beta\langle x, y\rangle}f(y)\,dy` on the
    harmonics of degree k = 0..``degree`` (Funk–Hecke), or their ``derivative`` (0, 1, 2) in β:

    .. math::
        S^1:\ \lambda_k = \int_0^{2\pi}e^{\beta\cos\psi}e^{ik\psi}\,d\psi = 2\pi I_k(\beta),\qquad
        S^2:\ \lambda_\ell = 2\pi\int_{-1}^{1}e^{\beta t}P_\ell(t)\,dt = 4\pi\,i_\ell(\beta)

    (:math:`i_\ell` the modified spherical Bessel function); β any real (β < 0: the signs
    :math:`(-1)^k`). The β-derivatives are the multipliers of :math:`t\,e^{\beta t}` and
    :math:`t^2e^{\beta t}` (:math:`t = \langle x, y\rangle`), from
    :math:`t\cos k\psi = \tfrac12(\cos(k-1)\psi + \cos(k+1)\psi)` and
    :math:`tP_\ell = ((\ell+1)P_{\ell+1} + \ell P_{\ell-1})/(2\ell+1)` (no division by β)."""
    from scipy.special import iv, spherical_in

    n = int(degree)
    k = np.arange(n + 1 + derivative)
    lam = 2.0 * np.pi * iv(k, beta) if d == 2 else 4.0 * np.pi * spherical_in(k, beta)
    for _ in range(derivative):  # degree j from j + 1 and j - 1 (S¹: I_{-1} = I_1)
        up = lam[1:]
        down = np.concatenate([lam[1:2] if d == 2 else [0.0], lam[:-2]])
        j = np.arange(len(up))
        lam = 0.5 * (up + down) if d == 2 else ((j + 1) * up + j * down) / (2 * j + 1)
    return lam[: n + 1]


def _multiply(grid, lam, c):
    """Coefficients c times the multipliers lam by degree (S¹: by k; S²: by ℓ)."""
    return lam * c if isinstance(grid, CircleHarmonics) else lam[:, None] * c


def funk_hecke_sums(grid, rho, c, beta, want_ito=True):
    r"""The kernel sums of one head with :math:`D_h = cI` (c ≠ 0) of the band-limited density
    with nodal values ``rho`` (G,), exactly (:func:`funk_hecke` at s = βc):

    .. math::
        S^0 = \sum\lambda_\ell(s)\hat\rho_{\ell m}Y_{\ell m},\quad
        S^X = x\sum\lambda'_\ell(s)\hat\rho_{\ell m}Y_{\ell m} + \tfrac1s\nabla_S S^0,\quad
        S^I = \sum(\lambda_\ell + \lambda''_\ell)(s)\hat\rho_{\ell m}Y_{\ell m}

    (:math:`\langle x, S^X\rangle = \partial_s S^0` and :math:`P_xS^X = \nabla_S S^0/s`).
    O(L³) on S² instead of the quadrature's O(G²)."""
    s = beta * c
    L = grid.degree
    d = grid.d
    r = grid.analysis(rho)
    z = _multiply(grid, funk_hecke(s, L, d), r)
    S0 = grid.synthesis(z)
    SX = (grid.synthesis(_multiply(grid, funk_hecke(s, L, d, 1), r))[:, None] * grid.centres
          + grid.gradient(z) / s)
    SI = (S0 + grid.synthesis(_multiply(grid, funk_hecke(s, L, d, 2), r))) if want_ito else None
    return S0, SX, SI


@dataclass(frozen=True)
class SpectralDensityModel:
    r"""The attention model acting on the nodal values of a band-limited density.

    Parameters
    ----------
    model : the :class:`AttentionModel` (β, normalisation, sign, Laplacian heads, values,
        backend); the causal mask is refused.
    grid : :class:`~wflow.geometry.harmonics.CircleHarmonics` or
        :class:`~wflow.geometry.harmonics.SphereHarmonics`.
    cfl : the substep :math:`\Delta t = \mathrm{cfl}/(\sigma\text{-free } K\max|v| +
        \nu K(K+1))` (:attr:`DensityField.max_dt`; K the degree).
    nu : diffusion ν ≥ 0 (explicit, in every stage).
    positivity_tol : :meth:`evaluate` stops the run (NumericalError) when
        :math:`\min_g\rho_g < -\mathrm{tol}\max_g\rho_g`.
    route : ``"auto"``: the kernel sums of a head with :math:`D_h = cI`, c ≠ 0, by the
        Funk–Hecke multipliers (:func:`funk_hecke_sums`), of every other head by the
        quadrature (:func:`kernel_sums`); ``"quadrature"``: every head by the quadrature.
    """

    model: AttentionModel
    grid: CircleHarmonics | SphereHarmonics
    cfl: float = 0.4
    nu: float = 0.0
    positivity_tol: float = POSITIVITY_TOL
    route: str = "auto"

    split = False  # the diffusion is in every stage
    causal = False

    def __post_init__(self):
        if self.model.causal:
            raise ValueError("mask = 'causal': a density has no token order; the density "
                             "representation needs mask = 'none'")
        if not 0 < self.cfl <= 1:
            raise ValueError(f"cfl = {self.cfl!r}: must be in (0, 1]")
        if not self.nu >= 0:
            raise ValueError(f"nu = {self.nu!r}: the diffusion must be >= 0")
        if self.route not in ("auto", "quadrature"):
            raise ValueError(f"route = {self.route!r}: allowed values are 'auto', 'quadrature'")

    @property
    def sigma(self) -> float:
        return self.model.sigma

    @property
    def beta(self) -> float:
        return self.model.beta

    @property
    def normalization(self) -> str:
        return self.model.normalization

    def points(self, P: int) -> np.ndarray:
        """The nodes as a batch of points (P, G, d)."""
        c = self.grid.centres
        return np.broadcast_to(c, (P, *c.shape)).copy()

    def check_positive(self, rho, what="density") -> None:
        r"""A :class:`~wflow.errors.NumericalError` (one line) when
        :math:`\min_g\rho_g < -\mathrm{tol}\max_g\rho_g` on some path."""
        lo, hi = np.min(rho, axis=-1), np.max(rho, axis=-1)
        bad_paths = lo < -self.positivity_tol * hi
        if np.any(bad_paths):
            p = int(np.argmax(bad_paths))
            raise NumericalError(
                f"{what}: the spectral density's grid minimum {lo[p]:.3g} is below "
                f"-density.positivity_tol * max = {-self.positivity_tol * hi[p]:.3g} (path {p}); "
                f"positivity is lost at degree {self.grid.degree}: raise density.degree "
                "(or model.diffusion)")

    def evaluate(self, rho, D, want_ito=True, check=True) -> DensityField:
        """Every field quantity of the density ``rho`` (P, G) at weights D (P, H, d, d); with
        ``check`` the positivity monitor first (:meth:`check_positive`)."""
        rho = np.asarray(rho, dtype=float)
        if check:
            self.check_positive(rho)
        g = self.grid
        masses = g.masses(rho)
        F = quadrature_field(self.model, g, masses, D, want_ito, self.route)
        sigma = self.sigma
        if isinstance(g, CircleHarmonics):
            a = sigma * np.einsum("pka,ka->pk", F.velocity, g.tangents)
            c = -g.flux_divergence(rho * a)
            speed = g.speed_bound(a)
        else:
            c = -g.flux_divergence(sigma * rho[..., None] * F.velocity)
            speed = g.speed_bound(np.linalg.norm(F.velocity, axis=-1))
        rho_hat = None
        if self.nu:
            rho_hat = g.analysis(rho)
            lam = g.eigenvalues
            c = c - self.nu * lam * rho_hat
        rate = g.synthesis(c)
        K = g.degree
        with np.errstate(divide="ignore"):
            bound = speed + self.nu * K * (K + 1)
            max_dt = np.where(bound > 0, self.cfl / np.where(bound > 0, bound, 1.0), np.inf)
        Phi = F.partition.mean(axis=1) / self.beta
        kw = dict(F.__dict__)
        kw["dissipation"] = sigma * np.sum(g.weights * Phi * rate, axis=-1)
        out = DensityField(**kw, rate=rate, flux=None, max_dt=max_dt,
                           dissipation_cells=F.dissipation, masses=masses)
        if self.nu:
            pos = rho > 0
            logr = np.log(np.where(pos, rho, 1.0))
            out.entropy = np.sum(masses * logr, axis=-1)
            out.free_energy = -sigma * out.energy + self.nu * out.entropy
            dS = np.sum(g.weights * logr * rate, axis=-1)
            out.free_energy_rate = -out.dissipation + self.nu * dS
        return out

    def rate(self, rho, D) -> np.ndarray:
        r""":math:`\dot\rho` (P, G) at frozen weights D (the stages of a step; no monitor)."""
        return self.evaluate(rho, D, want_ito=False, check=False).rate

    def velocity(self, rho, D) -> np.ndarray:
        """The σ-free field v at the nodes (P, G, d)."""
        rho = np.asarray(rho, dtype=float)
        return quadrature_field(self.model, self.grid, self.grid.masses(rho), D, False,
                                self.route).velocity


#: rows of the kernel matrix per block of the quadrature
_BLOCK = 1 << 21
#: bytes of kernel matrices kept between evaluations (the stages of a step share D_k; a
#: frozen D every step): least recently used first out
CACHE_BYTES = 256 << 20
_cache: OrderedDict = OrderedDict()


def _kernel_matrix(X, Dh, beta):
    r""":math:`e^{\beta\langle x_g, D_h x_{g'}\rangle - c}` (G, G), computed by blocks of rows
    (the same bits whether or not it is kept), kept in a small LRU cache keyed by
    (X, D_h, β) when it fits :data:`CACHE_BYTES`; None when it does not fit."""
    G = X.shape[0]
    if 8 * G * G > CACHE_BYTES:
        return None
    key = (X.shape, X[:3].tobytes(), np.asarray(Dh, dtype=float).tobytes(), float(beta))
    E = _cache.get(key)
    if E is not None:
        _cache.move_to_end(key)
        return E
    c = beta * float(np.linalg.norm(Dh, ord=2))
    Q = beta * (X @ Dh)
    E = np.empty((G, G))
    step = max(1, _BLOCK // G)
    for a in range(0, G, step):
        E[a:a + step] = np.exp(Q[a:a + step] @ X.T - c)
    _cache[key] = E
    while sum(v.nbytes for v in _cache.values()) > CACHE_BYTES:
        _cache.popitem(last=False)
    return E


def kernel_sums(X, m, Dh, beta, want_ito=True):
    r"""The quadrature of the kernel sums of one head at the nodes X (G, d), masses m (G,)
    (any sign):

    .. math::
        S^0_g = \sum_{g'}m_{g'}e^{s_{gg'}},\quad S^X_g = \sum_{g'}m_{g'}e^{s_{gg'}}x_{g'},\quad
        S^I_g = \sum_{g'}m_{g'}e^{s_{gg'}}(1 + \langle x_g, x_{g'}\rangle^2),\qquad
        s_{gg'} = \beta\langle x_g, D_h x_{g'}\rangle,

    by blocks of rows of :math:`e^{s - c}`, :math:`c = \beta\lVert D_h\rVert_2`: (G,), (G, d),
    (G,) (S^I None without ``want_ito``). O(G²) per head (the exponentials once per D_h
    while the matrix is kept, :func:`_kernel_matrix`)."""
    G, d = X.shape
    c = beta * float(np.linalg.norm(Dh, ord=2))
    Q = beta * (X @ Dh)
    iu = [(a, b) for a in range(d) for b in range(a, d)]
    cols = [m, m[:, None] * X] + ([np.column_stack([m * X[:, a] * X[:, b] for a, b in iu])]
                                  if want_ito else [])
    W = np.column_stack(cols)
    out = np.empty((G, W.shape[1]))
    step = max(1, _BLOCK // G)
    E = _kernel_matrix(X, Dh, beta)
    for a in range(0, G, step):
        Ea = np.exp(Q[a:a + step] @ X.T - c) if E is None else E[a:a + step]
        out[a:a + step] = Ea @ W
    out *= np.exp(c)
    S0, SX = out[:, 0], out[:, 1:1 + d]
    SI = None
    if want_ito:
        M = out[:, 1 + d:]
        SI = S0 + sum((1.0 if a == b else 2.0) * X[:, a] * X[:, b] * M[:, k]
                      for k, (a, b) in enumerate(iu))
    return S0, SX, SI


def quadrature_field(model: AttentionModel, grid, masses, D, want_ito=True,
                     route="auto") -> Field:
    r"""The field of [model §2–4] of the weighted nodes :math:`\{(x_g, m_g)\}` of ``grid``
    (masses of any sign, (P, G)) from the kernel sums (:func:`funk_hecke_sums` for a head
    :math:`D_h = cI`, c ≠ 0, with ``route = "auto"``; :func:`kernel_sums` otherwise):
    :math:`Z_h = S^0_h`, the per-node combine of
    :func:`wflow.kernels.spectral.combine` (every normalisation, Laplacian heads, values,
    ``head_combine``), and the mass-weighted means

    .. math::
        E = \frac{1}{2\beta H}\sum_h\sum_g m_g Z_h(x_g),\quad
        \mathcal D = \sum_g m_g\langle g_g, v_g\rangle,\quad
        G^2 = \sum_g m_g\frac{\lvert v_g\rvert^2}{\bar m_g},\quad
        G^2_{hm} = \sum_g m_g\lvert v_g\rvert^2\bar Z_g,

    :math:`\partial_{D_h}E = \frac{1}{2H}\sum_g m_g x_g (S^X_{hg})^T`, Itô sum
    :math:`\frac{1}{2H}\sum_h\sum_g m_g S^I_{hg}`."""
    from wflow.kernels import spectral as _sp

    masses = np.asarray(masses, dtype=float)
    D = np.asarray(D, dtype=float)
    X = grid.centres
    P, (G, d) = masses.shape[0], X.shape
    H = D.shape[1]
    beta = float(model.beta)
    lap = np.zeros(H, dtype=bool)
    lap[list(model.laplacian_heads)] = True
    vals = model.values
    general = model.interaction == "general"
    if not general:
        check_symmetric(D)
    out = {k: [] for k in Field.__dataclass_fields__}
    for p in range(P):
        m = masses[p]
        sums = []
        for h in range(H):
            c = D[p, h, 0, 0]
            if route == "auto" and c != 0 and np.array_equal(D[p, h], c * np.eye(d)):
                sums.append(funk_hecke_sums(grid, m / grid.weights, c, beta, want_ito))
            else:
                sums.append(kernel_sums(X, m, D[p, h], beta, want_ito))
        S0 = np.stack([s[0] for s in sums])
        SX = np.stack([s[1] for s in sums])
        V = D[p] if vals is None else np.broadcast_to(np.asarray(vals, dtype=float), D[p].shape)
        v, gr = np.empty((G, d)), np.empty((G, d))
        zbar, mbar = np.empty(G), np.empty(G)
        _sp.combine(X, D[p], V, G * S0, G * SX, lap,
                    ("head", "joint", "none").index(model.normalization), general,
                    model.head_combine == "sum", v, gr, zbar, mbar)
        v2 = np.sum(v * v, axis=1)
        out["velocity"].append(v)
        out["partition"].append(S0)
        out["b_hat"].append(1.0 / zbar)
        out["G2"].append(np.sum(m * v2 / mbar))
        out["G2_hm"].append(np.sum(m * v2 * zbar))
        if general:
            out["gradient"].append(np.full((G, d), np.nan))
            for k in ("energy", "dissipation", "ito_sum"):
                out[k].append(np.nan)
            out["dE_dD"].append(np.full((H, d, d), np.nan))
            continue
        out["gradient"].append(gr)
        out["energy"].append(np.sum(S0 @ m) / (2 * beta * H))
        out["dissipation"].append(np.sum(m * np.sum(gr * v, axis=1)))
        out["dE_dD"].append(np.einsum("g,ga,hgb->hab", m, X, SX) / (2 * H))
        out["ito_sum"].append(np.sum(np.stack([s[2] for s in sums]) @ m) / (2 * H)
                              if want_ito else np.nan)
    return Field(**{k: np.stack([np.asarray(a, dtype=float) for a in v])
                    for k, v in out.items()})


def initial_density(init: dict, grid, tol: float = POSITIVITY_TOL) -> np.ndarray:
    r"""Nodal values (G,) of :math:`P_L\rho_0` for the initial law of ``[init]`` (the
    projection of the closed form, analysed on a grid of degree 4L + 4): ``uniform``
    (:math:`1/\lvert S^{d-1}\rvert`), ``vmf`` (S¹: von Mises about :math:`e_2`; S²:
    :math:`\kappa e^{\kappa\langle e_3, x\rangle}/(4\pi\sinh\kappa)`), ``uniform_mode`` and
    ``uniform_noise`` (:math:`\bar\rho(1 + \xi)`, :func:`wflow.model.density.perturbation`).
    A projection whose minimum is below :math:`-\mathrm{tol}\max` is a
    :class:`~wflow.errors.ConfigError` naming ``density.degree``."""
    kind = init["tokens"]
    s1 = isinstance(grid, CircleHarmonics)
    area = 2 * np.pi if s1 else 4 * np.pi
    if kind == "uniform":
        return np.full(grid.N, 1.0 / area)
    if kind == "vmf":
        kappa = float(init["kappa"])
        if s1:
            f = lambda th: von_mises_density(th, kappa, np.pi / 2)  # noqa: E731
        else:
            f = lambda x: (kappa * np.exp(kappa * (x[:, 2] - 1.0))  # noqa: E731
                           / (2 * np.pi * -np.expm1(-2 * kappa)))
    elif kind in ("uniform_mode", "uniform_noise"):
        xi = perturbation(init, 2 if s1 else 3)
        f = lambda x: (1.0 + xi(x)) / area  # noqa: E731
    else:
        raise ValueError(f"tokens = {kind!r}: a density starts from 'uniform', 'vmf', "
                         "'uniform_mode' or 'uniform_noise'")
    rho = grid.values(f)
    if rho.min() < -tol * rho.max():
        raise ConfigError(f"density.degree = {grid.degree}: the initial density {kind!r} "
                          f"projected onto degree {grid.degree} has grid minimum "
                          f"{rho.min():.3g} (below -density.positivity_tol * max); raise "
                          "density.degree")
    if kind in ("uniform_mode", "uniform_noise") and rho.min() < 0:
        raise ConfigError(f"init.amplitude = {init['amplitude']!r}: the perturbed start "
                          f"{kind!r} is negative at a node ({rho.min():.3g}); a density needs "
                          "a smaller amplitude")
    return rho


#: given nodal values must be band-limited to this, relative to their largest value
BAND_TOL = 1e-10


def given_density(rho, grid) -> np.ndarray:
    r"""Given nodal values ``rho`` (P, G) (e.g. the ``rho`` of a spectral result), used as
    they are: a :class:`~wflow.errors.ConfigError` unless band-limited to the degree,
    :math:`\max\lvert P_L\rho - \rho\rvert \le 10^{-10}\max\lvert\rho\rvert` (a part above
    the degree would never move)."""
    rho = np.asarray(rho, dtype=float)
    off = float(np.max(np.abs(grid.project(rho) - rho)))
    if off > BAND_TOL * float(np.max(np.abs(rho))):
        raise ConfigError(f"tokens: the given nodal values are not band-limited to "
                          f"density.degree = {grid.degree} (a part of size {off:.3g} above "
                          "it); a spectral run starts from the nodal values of a density of "
                          "that degree (the rho of a spectral result)")
    return rho


def spectral_model(model: AttentionModel, d: int, dn: dict, nu: float) -> SpectralDensityModel:
    """The :class:`SpectralDensityModel` of the ``[density]`` table ``dn``."""
    return SpectralDensityModel(model, harmonics(d, int(dn["degree"])), cfl=float(dn["cfl"]),
                                nu=float(nu), positivity_tol=float(dn["positivity_tol"]))


# ------------------------------------------------------------------ configuration keys
def _spectral_rule(cfg):
    """The spectral representation steps the diffusion explicitly with mobility one."""
    dn = cfg["density"]
    if cfg["solver"]["representation"] != "density" or dn["representation"] != "spectral":
        return
    where = "with density.representation = 'spectral'"
    if dn["diffusion_scheme"] != "explicit":
        raise bad("density.diffusion_scheme", dn["diffusion_scheme"],
                  f"must be 'explicit' {where} (the diffusion is in every stage)")
    if dn["diffusion_mobility"] != "one":
        raise bad("density.diffusion_mobility", dn["diffusion_mobility"], f"must be 'one' {where}")


declare(
    Param("density.representation", "fv", Choice(REPRESENTATIONS),
          "fv: finite volumes (cell averages of density.cells cells); spectral: a band-limited "
          "density (Fourier degree K on S^1, spherical harmonics to degree L on S^2) by its "
          "values on a dealiased quadrature grid [model §5b]",
          applies=When("solver.representation", "density"), rule=_spectral_rule),
    Param("density.degree", 32, Integer(lo=1),
          "spectral: the degree K (S^1: modes |k| <= K on 3K+1 or 3K+2 angles) or L (S^2: "
          "harmonics l <= L on the Gauss-Legendre grid of degree ceil(3L/2))",
          applies=When("density.representation", "spectral")),
    Param("density.positivity_tol", POSITIVITY_TOL, Interval(0, None, "left"),
          "spectral: the run stops (exit 1) when the grid minimum of rho falls below "
          "-tol * max rho",
          applies=When("density.representation", "spectral")),
)
