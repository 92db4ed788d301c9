"""The spectral representation of the density on S¹ and S² [model §5b, "The spectral
representation"]: the transforms, the kernel's Funk–Hecke multipliers, the heat kernel, the
uniform state's growth rates of [model §6c], spectral convergence in the degree, the time
order, the chain rule of the energy, agreement with the finite volumes, the engine switch."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import sph_harm_y
from test_io import crash_in_checkpoint

from wflow.engine.run import Simulation, simulate
from wflow.errors import ConfigError, NumericalError
from wflow.geometry import circle_fv as fv
from wflow.geometry.harmonics import CircleHarmonics, SphereHarmonics, harmonics
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.model.attention import AttentionModel
from wflow.model.density import DensityModel, real_harmonic, von_mises_density
from wflow.model.density_spectral import SpectralDensityModel, funk_hecke
from wflow.model.uniform_state import derived_rate
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext

U = np.finfo(float).eps / 2


def vmf(g, kappa):
    """The von Mises(–Fisher) density about e_2 (S¹) or e_3 (S²), projected onto the degree."""
    if isinstance(g, CircleHarmonics):
        return g.values(lambda th: von_mises_density(th, kappa, np.pi / 2))[None]
    return g.values(lambda x: kappa * np.exp(kappa * (x[:, 2] - 1.0))
                    / (2 * np.pi * -np.expm1(-2 * kappa)))[None]


def run(sm, rho, D, T, nsteps, method="ssprk3", substeps=True):
    """ρ after ``nsteps`` equal steps to T at frozen D (the engine's step context; without
    ``substeps`` no CFL substeps: the same time steps at every degree)."""
    st = DensityStepper(method, positive=False)
    for _ in range(nsteps):
        F = sm.evaluate(rho, D, want_ito=False)
        rho, info = st.step(StepContext(X=rho, dt=T / nsteps, sigma=sm.sigma, k1=F.rate,
                                        max_dt=F.max_dt if substeps else None,
                                        velocity=lambda r: sm.rate(r, D)))
        assert substeps or np.all(F.max_dt >= T / nsteps)  # (within the stable step)
    return rho


def coefficients(g, rho, degree):
    """The coefficients of ρ padded to ``degree``, scaled so that the Euclidean norm is the L²
    norm (S¹: √(2π)(c_0, √2 c_k); S²: (b_l0, √2 b_lm))."""
    c = g.analysis(rho)
    if isinstance(g, CircleHarmonics):
        out = np.zeros(c.shape[:-1] + (degree + 1,), complex)
        out[..., : c.shape[-1]] = c
        out[..., 1:] *= np.sqrt(2)
        return out * np.sqrt(2 * np.pi)
    out = np.zeros(c.shape[:-2] + (degree + 1, degree + 1), complex)
    out[..., : c.shape[-2], : c.shape[-1]] = c
    out[..., 1:] *= np.sqrt(2)
    return out


def l2(a):
    return float(np.sqrt(np.sum(np.abs(a) ** 2)))


# ----------------------------------------------------------------------- the transforms
@pytest.mark.parametrize("L", [5, 12])
def test_sphere_transforms_and_divergence(L):
    r"""On the degree-L grid: a band-limited function is reproduced to round-off; the weak-form
    divergence of :math:`\nabla_S f` is :math:`\Delta_S f = -\ell(\ell+1)f` for harmonic
    polynomials, and that of a rotational field :math:`x \times \nabla f` vanishes; the
    weights integrate the constant to 4π."""
    g = SphereHarmonics(L)
    x = g.centres
    X, Y, Z = x.T
    f = 1.0 + real_harmonic(3, 2, x) + 0.5 * real_harmonic(L, -L, x)
    assert np.max(np.abs(g.project(f) - f)) < 200 * U * L
    assert abs(g.weights.sum() - 4 * np.pi) < 64 * U
    p = X * Y * Z + Z  # degree 3 (harmonic) plus degree 1
    grad = np.stack([Y * Z, X * Z, X * Y + 1.0], -1)
    grad -= np.sum(grad * x, -1)[:, None] * x
    lap = -12.0 * X * Y * Z - 2.0 * Z
    assert np.max(np.abs(g.synthesis(g.flux_divergence(grad)) - lap)) < 500 * U * L
    rot = np.cross(x, grad)
    assert np.max(np.abs(g.synthesis(g.flux_divergence(rot)))) < 500 * U * L
    assert np.max(np.abs(p)) > 0.1  # (not a vacuous field)


def test_circle_transforms():
    """S¹: N = 3K+1 or 3K+2 (even) nodes; projection, derivative and the dealiased product:
    the product of two degree-K functions is analysed exactly onto |k| ≤ K."""
    for K in (7, 8):
        g = CircleHarmonics(K)
        assert g.N % 2 == 0 and g.N >= 3 * K + 1
        th = g.theta
        f = 2.0 + np.cos(3 * th) + np.sin(K * th)
        assert np.max(np.abs(g.project(f) - f)) < 64 * U
        dF = g.synthesis(g.flux_divergence(np.sin(2 * th)))
        assert np.max(np.abs(dF - 2 * np.cos(2 * th))) < 64 * U
        prod = np.cos(K * th) * np.cos((K - 1) * th)  # = (cos θ + cos (2K-1)θ) / 2
        assert np.max(np.abs(g.project(prod) - 0.5 * np.cos(th))) < 64 * U


# ----------------------------------------------------------------------- the field
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("c", [1.0, -0.7])
def test_partition_is_funk_hecke(d, c):
    r"""For D = cI the quadrature's :math:`Z = \int e^{\beta c\langle x,y\rangle}\rho(y)dy` of
    a harmonic of degree ℓ is the harmonic times :func:`funk_hecke` (:math:`2\pi I_\ell`,
    :math:`4\pi i_\ell`) at βc, to round-off: the normalisations of the multipliers and the
    quadrature's exactness (the kernel's tail beyond degree 2L + 1)."""
    L, beta = 10, 1.3
    g = harmonics(d, L)
    sm = SpectralDensityModel(AttentionModel(beta=beta), g, route="quadrature")
    for ell in (0, 1, 4, L):
        phi = np.cos(ell * g.theta) if d == 2 else real_harmonic(ell, min(ell, 2), g.centres)
        F = sm.evaluate(phi[None], c * np.eye(d)[None, None], want_ito=False, check=False)
        lam = funk_hecke(beta * c, L, d)[ell]
        assert np.max(np.abs(F.partition[0, 0] - lam * phi)) < 1e-13 * max(1.0, np.abs(lam))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("normalization", ["head", "joint", "none"])
@pytest.mark.parametrize("tied", [True, False])
def test_funk_hecke_route_is_the_quadrature(d, normalization, tied):
    r"""Heads :math:`D_h = c_hI` (c = 1.3 and −0.6, the second a Laplacian head) summed by the
    Funk–Hecke multipliers (:func:`funk_hecke_sums`: :math:`S^X` from the β-derivative and
    the surface gradient) give every field quantity and the rate of the quadrature route to
    round-off, tied values or V = 0.7 I."""
    g = harmonics(d, 10)
    am = AttentionModel(beta=1.4, normalization=normalization, laplacian_heads=(1,),
                        values=None if tied else 0.7 * np.eye(d)[None])
    D = np.stack([1.3 * np.eye(d), -0.6 * np.eye(d)])[None]
    rho = vmf(g, 2.0)
    a = SpectralDensityModel(am, g).evaluate(rho, D)
    b = SpectralDensityModel(am, g, route="quadrature").evaluate(rho, D)
    for k in ("velocity", "partition", "gradient", "energy", "dE_dD", "ito_sum", "rate",
              "dissipation", "G2", "G2_hm", "b_hat"):
        ref = np.asarray(getattr(b, k))
        assert np.max(np.abs(getattr(a, k) - ref)) < 1e-13 * np.max(np.abs(ref)), k


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("normalization", ["head", "none"])
def test_uniform_state_growth_rates(d, normalization):
    r"""Ascent, D = V = I: a perturbation :math:`\varepsilon\varphi_\ell` of the uniform state
    has the instantaneous rate :math:`\lambda_\ell` of [model §6c] (to O(ε)), and after t = 2
    its amplitude is :math:`\varepsilon e^{\lambda_\ell t}` within the time error of SSP-RK3
    at Δt = 0.05 (relative ~1e-6)."""
    beta, eps, L = 1.5, 1e-7, 8
    g = harmonics(d, L)
    sm = SpectralDensityModel(AttentionModel(beta=beta, normalization=normalization,
                                             sign="ascent"), g)
    D = np.eye(d)[None, None]
    area = 2 * np.pi if d == 2 else 4 * np.pi
    for ell in (1, 3):
        phi = np.cos(ell * g.theta) if d == 2 else real_harmonic(ell, 1, g.centres)
        rho = (1 + eps * phi)[None] / area
        amp = lambda r, phi=phi: np.sum(g.weights * (r[0] - 1 / area) * phi) / np.sum(  # noqa: E731
            g.weights * phi * phi) * area
        lam = derived_rate(ell, beta, normalization, 0.0, d)
        rate = np.sum(g.weights * sm.rate(rho, D)[0] * phi) / np.sum(g.weights * phi * phi)
        assert abs(rate * area / eps - lam) < 1e-6 * abs(lam)
        r1 = run(sm, rho, D, 2.0, 40)
        assert abs(amp(r1) / (eps * np.exp(2.0 * lam)) - 1.0) < 1e-5


@pytest.mark.parametrize("d", [2, 3])
def test_heat_kernel_decay(d):
    r"""Field-free (D = 0 and tied values: v = 0), :math:`\dot\rho = \nu\Delta_S\rho`: each
    harmonic decays as :math:`e^{-\nu\mu_\ell t}`, :math:`\mu_\ell = k^2` or
    :math:`\ell(\ell+1)`, within SSP-RK3's error at the step (relative
    :math:`(\nu\mu\Delta t)^3 t/\Delta t/24`); mass exact."""
    nu, L, T, n = 0.05, 8, 1.0, 100
    g = harmonics(d, L)
    sm = SpectralDensityModel(AttentionModel(beta=1.0), g, nu=nu)
    area = 2 * np.pi if d == 2 else 4 * np.pi
    modes = (1, 4, 8)
    phis = [np.cos(k * g.theta) if d == 2 else real_harmonic(k, 0, g.centres) for k in modes]
    rho = (1.0 + 0.1 * sum(phis))[None] / area
    r1 = run(sm, rho, np.zeros((1, 1, d, d)), T, n)
    assert abs(np.sum(g.masses(r1)) - 1.0) < 64 * U
    for k, phi in zip(modes, phis):
        mu = k * k if d == 2 else k * (k + 1)
        a = np.sum(g.weights * r1[0] * phi) / np.sum(g.weights * phi * phi) * area / 0.1
        z = nu * mu * T / n
        assert abs(a / np.exp(-nu * mu * T) - 1.0) < n * z**4 / 24 * 2 + 1e-12


# ----------------------------------------------------------------------- convergence
def _frozen(d):
    return (np.diag([1.0, 0.4])[None, None] if d == 2
            else np.array([[[[1.0, 0.2, 0.0], [0.2, 0.6, 0.1], [0.0, 0.1, -0.3]]]]))


@pytest.mark.parametrize("d, degrees, ref, T, n", [
    (2, (8, 16, 32), 64, 0.5, 100), (3, (4, 8), 16, 0.25, 10),
    pytest.param(3, (4, 8, 16), 24, 0.25, 10, marks=pytest.mark.slow)])
def test_spectral_convergence_in_degree(d, degrees, ref, T, n):
    r"""A von Mises(–Fisher) start (κ = 3 on S¹, 2 on S²) carried to T by a frozen
    non-identity D (ascent, β = 1.5; the same n steps at every degree, no substeps): the L²
    distance to the solution of degree ``ref`` falls by at least 100× when the degree doubles
    (faster than any power), and the mass stays 1 to round-off."""
    kappa = 3.0 if d == 2 else 2.0
    D = _frozen(d)
    am = AttentionModel(beta=1.5, sign="ascent")
    sols = {}
    for L in (*degrees, ref):
        g = harmonics(d, L)
        r = run(SpectralDensityModel(am, g), vmf(g, kappa), D, T, n, substeps=False)
        assert abs(np.sum(g.masses(r)) - 1.0) < 256 * U
        sols[L] = coefficients(g, r[0], ref)
    err = [l2(sols[L] - sols[ref]) for L in degrees]
    assert all(e1 <= e0 / 100 for e0, e1 in zip(err, err[1:])), err


@pytest.mark.parametrize("method, order", [("heun", 2), ("ssprk3", 3)])
def test_time_order(method, order):
    """S¹, K = 16, frozen non-identity D, descent: successive differences at Δt, Δt/2, Δt/4
    (no substeps) fall at the tableau's order (observed within 0.25)."""
    g = CircleHarmonics(16)
    sm = SpectralDensityModel(AttentionModel(beta=2.0, normalization="joint"), g)
    rho0 = vmf(g, 2.0)
    sol = [run(sm, rho0, _frozen(2), 1.0, n, method, substeps=False) for n in (20, 40, 80)]
    d1, d2 = l2(sol[0] - sol[1]), l2(sol[1] - sol[2])
    assert abs(np.log2(d1 / d2) - order) < 0.25, (d1, d2)


@pytest.mark.parametrize("d", [2, 3])
def test_energy_chain_rule(d):
    r"""For frozen D, :math:`dE/dt = \sigma\mathcal D_h = \sum_g\omega_g\Phi_g\dot\rho_g`
    exactly: a centred difference of E along :math:`\dot\rho` agrees to its O(h²) error, with
    diffusion too; the kernel's quadrature :math:`\sum m\langle g, v\rangle` agrees to the
    spectral error only."""
    g = harmonics(d, 10)
    for sign in ("descent", "ascent"):
        sm = SpectralDensityModel(AttentionModel(beta=1.2, sign=sign), g, nu=0.02)
        D = _frozen(d)
        rho = vmf(g, 2.0)
        F = sm.evaluate(rho, D)
        h = 1e-4
        E = lambda r, sm=sm, D=D: sm.evaluate(r, D, want_ito=False).energy[0]  # noqa: E731
        dE = (E(rho + h * F.rate) - E(rho - h * F.rate)) / (2 * h)
        assert abs(dE - sm.sigma * F.dissipation[0]) < 1e-7 * abs(dE)
        assert abs(F.dissipation_cells[0] - F.dissipation[0]) > 1e-6 * abs(dE)


@pytest.mark.slow
def test_agrees_with_finite_volumes():
    r"""S¹, D = I frozen, descent, von Mises κ = 2 to T = 0.25: the spectral solution (K = 32)
    averaged over the cells of N = 1024 is within the finite-volume error there (estimated by
    the difference of N = 512 and 1024, second order) of the finite-volume solution."""
    T, kappa = 0.25, 2.0
    D = np.eye(2)[None, None]
    am = AttentionModel(beta=1.0)
    fvs = {}
    for N in (512, 1024):
        grid = fv.CircleGrid(N)
        dm = DensityModel(am, grid)
        rho = grid.cell_averages(lambda th: von_mises_density(th, kappa, np.pi / 2))[None]
        n = int(round(T / (0.2 * grid.h)))
        st = DensityStepper("ssprk3")
        for _ in range(n):
            F = dm.evaluate(rho, D, want_ito=False)
            rho, _ = st.step(StepContext(X=rho, dt=T / n, sigma=dm.sigma, k1=F.rate,
                                         max_dt=F.max_dt, velocity=lambda r, dm=dm: dm.rate(r, D)))
        fvs[N] = rho[0]
    g = CircleHarmonics(32)
    c = g.analysis(run(SpectralDensityModel(am, g), vmf(g, kappa), D, T, 50)[0])
    h = 2 * np.pi / 1024
    a = h * np.arange(1024)
    k = np.arange(1, 33)
    cell = (np.exp(1j * np.outer(a + h, k)) - np.exp(1j * np.outer(a, k))) / (1j * k * h)
    spec = c[0].real + 2 * np.real(cell @ c[1:])
    fine = fvs[1024].reshape(512, 2).mean(axis=1)  # the N = 1024 solution on the 512 cells
    fv_err = np.max(np.abs(fine - fvs[512]))
    dev = np.max(np.abs(spec - fvs[1024]))
    assert dev < fv_err, (dev, fv_err)


def _at_points(c, x):
    r"""The real function with coefficients c (L+1, L+1) [ℓ, m] at points x (M, 3):
    :math:`\sum_\ell[c_{\ell 0}Y_{\ell 0} + 2\operatorname{Re}\sum_{m\ge1}c_{\ell m}Y_{\ell m}]`
    (SciPy's orthonormal harmonics, Condon–Shortley phase as in the module)."""
    th, ph = np.arccos(np.clip(x[:, 2], -1.0, 1.0)), np.arctan2(x[:, 1], x[:, 0])
    f = np.zeros(len(x))
    for ell in range(c.shape[0]):
        for m in range(ell + 1):
            f += (1 if m == 0 else 2) * np.real(c[ell, m] * sph_harm_y(ell, m, th, ph))
    return f


@pytest.mark.slow
@pytest.mark.parametrize("sign, interaction", [("ascent", "symmetric"), ("descent", "general")])
def test_agrees_with_finite_volumes_on_the_sphere(sign, interaction):
    r"""S², a von Mises–Fisher start (κ = 2) carried to T = 0.25 by a frozen non-identity D
    (β = 1.5; with ``general`` D plus an antisymmetric part, so a transposed D would show):
    the L¹ distance between the finite volumes on Voronoi meshes of N = 250 … 2000 cells and
    the spectral solution (L = 12, its own error ≈ 10⁻⁷) at the cell centres falls with the
    mesh size at the finite volumes' first order (fitted 0.86 and 1.06; asserted within
    [0.6, 1.4]) and is below 10 % of the distance the density moved at N = 2000 (measured
    3.7 % and 6 %). A transposed D in either solver leaves a distance of ≈ 5·10⁻² at every N."""
    T, kappa, nsteps = 0.25, 2.0, 40
    D = _frozen(3)
    if interaction == "general":
        D = D + np.array([[[[0.0, 0.3, 0.2], [-0.3, 0.0, 0.0], [-0.2, 0.0, 0.0]]]])
    am = AttentionModel(beta=1.5, sign=sign, interaction=interaction)
    g = harmonics(3, 12)
    c = g.analysis(run(SpectralDensityModel(am, g), vmf(g, kappa), D, T, nsteps, substeps=False)[0])
    hs, dist = [], []
    for N in (250, 500, 1000, 2000):
        mesh = voronoi_mesh(N)
        dm = DensityModel(am, mesh)
        rho0 = mesh.cell_values(lambda x: np.exp(kappa * x[:, 2]))[None]
        rho = run(dm, rho0, D, T, nsteps)
        hs.append(np.sqrt(4 * np.pi / N))
        dist.append(mesh.areas @ np.abs(rho[0] - _at_points(c, mesh.centres)))
    moved = mesh.areas @ np.abs(rho[0] - rho0[0])
    order = np.polyfit(np.log(hs), np.log(dist), 1)[0]
    assert 0.6 < order < 1.4, (order, dist)
    assert dist[-1] < 0.1 * moved, (dist, moved)


# ----------------------------------------------------------------------- the engine
def spectral_cfg(d=2, **over):
    cfg = {"model": {"d": d, "heads": 2, "n": 8},
           "init": {"tokens": "vmf", "kappa": 2.0},
           "weights": {"process": "ou"},
           "solver": {"representation": "density", "method": "ssprk3", "dt": 0.02, "T": 0.2,
                      "record_every": 5, "paths": 2},
           "density": {"representation": "spectral", "degree": 24},
           "diagnostics": {"ledger": True}, "output": {"store_tokens": True}}
    for key, val in over.items():
        sec, k = key.split("__")
        cfg.setdefault(sec, {})[k] = val
    return cfg


def test_engine_run_keeps_mass_and_records_rho():
    """A spectral run through the engine (OU weights, two heads, two paths): ``rho`` holds the
    nodal values (records, P, N) with N = 3K+2, the mass is 1 to round-off, the grid minimum
    is the stepper's ``rho_min``, the exact ledger closes at the integrator's order."""
    r = simulate(spectral_cfg())
    rho = np.asarray(r["rho"])
    g = CircleHarmonics(24)
    assert rho.shape == (3, 2, g.N)
    assert np.max(np.abs(np.asarray(r["mass"]) - 1.0)) < 256 * U
    np.testing.assert_array_equal(np.asarray(r["rho_min"])[1:], rho[1:].min(axis=-1))
    res = np.abs(np.asarray(r["ledger_residual"])[-1])
    assert np.all(res < 1e-3 * np.abs(np.asarray(r["energy"])[0]))


def test_resume_is_bit_identical(tmp_path, monkeypatch):
    """A spectral run (OU weights, diffusion) that dies while writing a checkpoint resumes
    from it and gives records bit-identical to an uninterrupted run."""
    import h5py

    from wflow.engine import driver

    cfg = spectral_cfg(solver__T=0.3, solver__record_every=3, output__checkpoint_every=4,
                       density__degree=20, model__diffusion=0.05, weights__noise_var=0.5)
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, cfg, tmp_path / "r.h5", 3)
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("rho", "series/energy", "series/ledger_residual", "series/mass",
                     "series/rho_min", "series/free_energy", "series/free_energy_residual"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


def test_positivity_monitor():
    """An under-resolved start is refused naming density.degree; a run whose grid minimum
    falls below -tol·max stops with one NumericalError line naming density.positivity_tol."""
    with pytest.raises(ConfigError, match="density.degree"):
        simulate(spectral_cfg(init__kappa=40.0, density__degree=6))
    cfg = spectral_cfg(init__kappa=8.0, density__degree=12, model__sign="ascent",
                       model__beta=4.0, weights__process="frozen", solver__T=2.0)
    with pytest.raises(NumericalError, match="density.positivity_tol") as e:
        simulate(cfg)
    assert "\n" not in str(e.value)


def test_keys_refused():
    """The split and mobility-weighted diffusions are finite-volume only (one line naming
    the key)."""
    with pytest.raises(ConfigError, match="density.diffusion_scheme"):
        simulate(spectral_cfg(model__diffusion=0.1, density__diffusion_scheme="split"))
    with pytest.raises(ConfigError, match="density.diffusion_mobility"):
        simulate(spectral_cfg(model__diffusion=0.1, density__diffusion_mobility="b_hat"))
    for key, value in (("cells", 64), ("limiter", "minmod"), ("lloyd", 2)):  # finite volumes only
        with pytest.raises(ConfigError, match=f"density.{key} = .* cannot apply"):
            simulate(spectral_cfg(d=3, **{f"density__{key}": value}))
    with pytest.raises(ConfigError, match="nodal values of the grid of density.degree = 24"):
        Simulation(spectral_cfg(), tokens=np.ones(7))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("process", ["frozen", "ou", "oscillating", "layers"])
def test_weight_processes(d, process):
    """Every weight process drives a spectral density through the engine (S¹ and S²,
    head normalisation, two heads): mass 1 to round-off at every record, the exact energy
    ledger's residual small against the energy (it closes at the integrator's order), and a
    non-trivial motion (the density changes)."""
    over = {"weights__process": process, "density__degree": 16 if d == 2 else 6,
            "solver__T": 0.2, "init__kappa": 1.0}
    if process == "layers":
        over["weights__layers"] = [{"duration": 0.1, "weights": "identity"},
                                   {"duration": 0.1, "weights": "symmetric_gaussian", "seed": 7}]
    r = simulate(spectral_cfg(d, **over))
    rho = np.asarray(r["rho"])
    assert np.max(np.abs(np.asarray(r["mass"]) - 1.0)) < 256 * U
    assert np.max(np.abs(rho[-1] - rho[0])) > 1e-4 * np.max(rho[0])
    res = np.abs(np.asarray(r["ledger_residual"])[-1])
    assert np.all(res < 1e-3 * np.abs(np.asarray(r["energy"])[0]))


def test_kept_kernel_matrix_gives_the_same_bits(monkeypatch):
    """The kernel matrix kept between evaluations (the stages of a step) gives the bits of
    the blocks computed afresh, and the cache stays within its budget."""
    from wflow.model import density_spectral as ds

    g = SphereHarmonics(6)
    sm = SpectralDensityModel(AttentionModel(beta=1.5), g)
    rho, D = vmf(g, 2.0), _frozen(3)
    ds._cache.clear()
    kept = [sm.evaluate(rho, D).rate for _ in range(2)]
    assert len(ds._cache) == 1
    monkeypatch.setattr(ds, "CACHE_BYTES", 0)
    ds._cache.clear()
    fresh = sm.evaluate(rho, D).rate
    assert len(ds._cache) == 0
    np.testing.assert_array_equal(kept[0], fresh)
    np.testing.assert_array_equal(kept[1], fresh)
    monkeypatch.setattr(ds, "CACHE_BYTES", 8 * g.N**2 + 1)  # room for one matrix
    for c in (0.5, 0.7, 0.9):
        sm.evaluate(rho, c * D)
    assert len(ds._cache) == 1


def test_given_nodal_values_continue_a_run():
    """A run started from the final ``rho`` of another continues it with the same bits (the
    given nodal values are used as they are); values with a part above the degree are refused
    naming the degree."""
    from wflow.engine.run import Simulation

    cfg = spectral_cfg(weights__process="frozen", solver__T=0.2, solver__record_every=10,
                       solver__paths=1)
    whole = simulate(cfg)
    half = simulate(spectral_cfg(weights__process="frozen", solver__T=0.1,
                                 solver__record_every=5, solver__paths=1))
    sim = Simulation(spectral_cfg(weights__process="frozen", solver__T=0.1,
                                  solver__record_every=5, solver__paths=1),
                     tokens=np.asarray(half["rho"])[-1])
    cont = sim.run()
    np.testing.assert_array_equal(np.asarray(cont["rho"])[-1], np.asarray(whole["rho"])[-1])
    g = CircleHarmonics(24)
    bad = np.asarray(half["rho"])[-1] * (1 + 0.01 * np.cos((g.N // 2) * g.theta))
    bad /= g.masses(bad).sum()
    with pytest.raises(ConfigError, match="density.degree"):
        Simulation(spectral_cfg(weights__process="frozen", solver__paths=1), tokens=bad)


@pytest.mark.parametrize("d", [2, 3])
def test_density_figure_draws_the_nodes(tmp_path, d):
    """The density figure of a spectral run draws the nodal values on the representation's own
    grid (the nodes of the degree, not a cell mesh), and names the degree."""
    from PIL import Image

    from wflow.analysis.results import SourceError
    from wflow.engine.driver import run_to_file
    from wflow.figures import plotting

    cfg = spectral_cfg(d, density__degree=10, solver__T=0.1)
    run_to_file(cfg, tmp_path / "s.h5")
    files = plotting.plot(tmp_path / "s.h5", "density", tmp_path / "fig", formats=("png",))
    assert [f.name for f in files] == ["density.png"]
    assert Image.open(files[0]).size[0] > 500
    if d == 3:  # a grid of another degree does not match rho: refused, not drawn wrongly
        import h5py

        with h5py.File(tmp_path / "s.h5", "r+") as f:
            f.attrs["config"] = f.attrs["config"].replace('"degree": 10', '"degree": 11')
        with pytest.raises(SourceError, match="density.degree = 11"):
            plotting.plot(tmp_path / "s.h5", "density", tmp_path / "fig2", formats=("png",))
