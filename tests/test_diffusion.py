r"""Diffusion in the density solver [model §5b]: the heat modes' orders in h on S¹ and S²,
mass and positivity, the free energy :math:`\mathcal F = -\sigma E + \nu\int\rho\log\rho` and its
ledger, the perturbed uniform starts, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from test_io import crash_in_checkpoint

from wflow.cli import main
from wflow.engine.run import Simulation, simulate
from wflow.errors import ConfigError
from wflow.geometry import circle_fv as fv
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.model.attention import AttentionModel
from wflow.model.density import (
    DensityModel,
    initial_density,
    perturbation,
    real_harmonic,
    von_mises_density,
)
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext

U = np.finfo(float).eps / 2


def cfg(d=2, **over):
    c = {"model": {"d": d, "heads": 1, "n": 8, "normalization": "none", "diffusion": 0.1,
                   "beta": 2.0, "sign": "ascent"},
         "init": {"tokens": "uniform_noise", "amplitude": 0.3, "weights": "identity"},
         "weights": {"process": "frozen"},
         "solver": {"representation": "density", "method": "heun", "dt": 0.02, "T": 0.4,
                    "record_every": 5, "paths": 1},
         "density": {"cells": 64 if d == 2 else 300},
         "diagnostics": {"ledger": True}}
    for key, val in over.items():
        sec, k = key.split("__")
        c.setdefault(sec, {})[k] = val
    if not c["init"]["tokens"].startswith("uniform_"):
        del c["init"]["amplitude"]
    return c


def heat(grid, rho, nu, T, method="ssprk3"):
    """Pure diffusion (zero field) of ``rho`` (1, N) to time T with the density stepper, at
    the step its CFL condition allows (one substep each)."""
    zero = np.zeros((1, grid.N, 2 if isinstance(grid, fv.CircleGrid) else 3))

    def rate(r):
        return grid.transport(r, zero, 1.0, cfl=0.4, nu=nu)[1]

    dt_max = float(grid.transport(rho, zero, 1.0, cfl=0.4, nu=nu)[2][0])
    n = int(np.ceil(T / dt_max))
    st = DensityStepper(method)
    for _ in range(n):
        rho, info = st.step(StepContext(X=rho, dt=T / n, sigma=1.0, k1=rate(rho),
                                        max_dt=np.array([dt_max]), velocity=rate))
        assert info["cfl_substeps"][0] == 1
    return rho


def fitted_order(h, err):
    """Least-squares slope of log err against log h over every mesh."""
    return np.polyfit(np.log(h), np.log(err), 1)[0]


# ------------------------------------------------------------------------- heat modes
def test_fourier_heat_modes_converge_at_order_two_on_s1():
    r"""Cell averages of :math:`(1 + \varepsilon\cos k\theta)/2\pi` decay as
    :math:`e^{-\nu k^2 t}`; the central difference gives :math:`e^{-\nu\lambda_h t}`,
    :math:`\lambda_h = (2 - 2\cos kh)/h^2 = k^2 - k^4h^2/12 + \dots`: order 2 in L¹ and L∞
    (the time error of SSP-RK3 at Δt ∝ h² is O(h⁶)). Fitted from four grids."""
    nu, T, eps = 0.1, 1.0, 0.5
    for k in (1, 3):
        hs, e1, ei = [], [], []
        for N in (16, 32, 64, 128):
            g = fv.CircleGrid(N)
            rho = g.cell_averages(lambda th, k=k: (1 + eps * np.cos(k * th)) / (2 * np.pi))
            out = heat(g, rho[None], nu, T)[0]
            exact = g.cell_averages(
                lambda th, k=k: (1 + eps * np.exp(-nu * k * k * T) * np.cos(k * th)) / (2 * np.pi))
            err = (out - exact) * 2 * np.pi / eps
            hs.append(g.h)
            e1.append(np.abs(err).sum() * g.h / (2 * np.pi))
            ei.append(np.abs(err).max())
        for e in (e1, ei):
            assert abs(fitted_order(hs, e) - 2) < 0.05, (k, e)


def test_spherical_harmonic_heat_modes_converge_at_order_two_on_s2():
    r""":math:`(1 + \varepsilon\tilde Y_{\ell m})/4\pi` at the centres of the Fibonacci Voronoi
    mesh decays as :math:`e^{-\nu\ell(\ell+1)t}`. The two-point flux is only first-order
    consistent cell by cell on an irregular mesh, yet the error at the centres falls as h²
    (measured 2.00 ± 0.02 in L² and L∞, ℓ = 2, 3, N = 250..4000, with and without Lloyd
    iterations; h = √(4π/N)). Fitted from four meshes."""
    nu, T, eps = 0.1, 0.5, 0.5
    for ell, m in ((2, 1), (3, -2)):
        hs, e2, ei = [], [], []
        for N in (250, 500, 1000, 2000):
            mesh = voronoi_mesh(N)
            Y = real_harmonic(ell, m, mesh.centres)
            out = heat(mesh, ((1 + eps * Y) / (4 * np.pi))[None], nu, T)[0]
            err = (out * 4 * np.pi - 1 - eps * np.exp(-nu * ell * (ell + 1) * T) * Y) / eps
            hs.append(np.sqrt(4 * np.pi / N))
            e2.append(np.sqrt(mesh.areas @ err**2 / (4 * np.pi)))
            ei.append(np.abs(err).max())
        for e in (e2, ei):
            assert abs(fitted_order(hs, e) - 2) < 0.1, (ell, m, e)


def test_real_harmonics_are_orthonormal_in_mean():
    r""":math:`\tilde Y_{\ell m}` has mean square 1 and is orthogonal to the others (a
    Gauss–Legendre in z times the trapezoid rule in φ, exact for these degrees, ℓ ≤ 4)."""
    z, wz = np.polynomial.legendre.leggauss(12)
    ph = np.arange(24) * 2 * np.pi / 24
    Z, PH = np.meshgrid(z, ph, indexing="ij")
    r = np.sqrt(1 - Z**2)
    x = np.stack([r * np.cos(PH), r * np.sin(PH), Z], axis=-1).reshape(-1, 3)
    w = (wz[:, None] * np.full(24, 2 * np.pi / 24)).ravel() / (4 * np.pi)
    lm = [(ell, m) for ell in range(0, 5) for m in range(-ell, ell + 1)]
    Ys = np.array([real_harmonic(ell, m, x) for ell, m in lm])
    gram = (Ys * w) @ Ys.T
    assert np.abs(gram - np.eye(len(lm))).max() < 1e-12


# ------------------------------------------------------------------------- mass, positivity
def test_mass_to_round_off_and_positivity_with_diffusion():
    """A steep start (κ = 40), ascent with three random heads, OU weights, ν = 0.05 and 0.5:
    Σ m_k = 1 to round-off and ρ ≥ 0 on S¹ and S² (the substeps obey the Courant condition
    of transport plus diffusion)."""
    for d, N in ((2, 48), (3, 200)):
        for nu in (0.05, 0.5):
            r = simulate(cfg(d, model__diffusion=nu, model__heads=3, model__normalization="head",
                             init__tokens="vmf", init__kappa=40.0,
                             init__weights="symmetric_gaussian", weights__process="ou",
                             solver__method="ssprk3", density__cells=N, solver__paths=2))
            assert np.max(np.abs(r.mass - 1.0)) <= 8 * N * U, (d, nu)
            assert np.all(r.rho >= 0.0) and np.nanmin(r.rho_min) > 0.0


@pytest.mark.parametrize("d", [2, 3])
def test_courant_bound_of_diffusion_is_the_positivity_bound(d):
    r"""All the mass in one cell, no field: forward Euler at the step of :func:`cfl_dt` with
    the positivity Courant number (1/2 on S¹, 1 on S²) empties the cell to round-off and keeps
    ρ ≥ 0; 5% beyond it the cell goes negative. On S² the bound is cell by cell, the cell
    chosen is the one that sets it."""
    nu = 0.3
    if d == 2:
        grid, cfl, k = fv.CircleGrid(40), fv.POSITIVE_CFL, 7
    else:
        grid, cfl = voronoi_mesh(300), 1.0
        w = grid.diffusion_weights
        out = np.bincount(grid.edges.ravel(), np.repeat(w, 2), grid.N)
        k = int(np.argmax(out / grid.areas))
    rho = np.zeros((1, grid.N))
    rho[0, k] = 1.0
    zero = np.zeros((1, grid.N, d))
    _, rate, dt = grid.transport(rho, zero, 1.0, cfl=cfl, nu=nu)
    at = rho + dt[0] * rate
    assert at.min() >= -16 * U and abs(at[0, k]) <= 16 * U
    assert (rho + 1.05 * dt[0] * rate)[0, k] < -0.01


def test_diffusion_substeps_a_step_above_its_limit():
    """Δt far above the diffusive limit h²/(2ν) on S¹: the step is split into the substeps the
    combined Courant condition asks for (reported as cfl_substeps), mass and ρ ≥ 0 kept."""
    r = simulate(cfg(model__diffusion=1.0, solver__dt=0.1, solver__T=0.2, solver__record_every=1,
                     density__cells=128))
    h = 2 * np.pi / 128
    assert np.nanmin(r.cfl_substeps) >= 0.1 / (0.4 * h * h / 1.0)
    assert np.all(r.rho >= 0) and np.max(np.abs(r.mass - 1)) <= 8 * 128 * U


# ------------------------------------------------------------------------- free energy
@pytest.mark.parametrize("d", [2, 3])
def test_free_energy_chain_rule(d):
    r"""Frozen weights: :math:`d\mathcal F_h/dt = \sum F\,\Delta\mu` of the semi-discrete system.
    The central difference of :math:`\mathcal F_h` along :math:`\dot\rho` with steps ε and ε/2
    (Richardson: error O(ε⁴)) matches ``free_energy_rate`` to the rounding of F; every
    normalisation, random heads."""
    sim = Simulation(cfg(d, model__heads=2, model__normalization="joint",
                         init__weights="symmetric_gaussian", model__beta=1.0), explicit=())
    D = sim.D0
    for norm in ("none", "joint", "head"):
        dm = DensityModel(AttentionModel(beta=1.0, normalization=norm, sign="ascent"),
                          sim.model.grid, nu=0.1)
        rho = sim.X0
        F = dm.evaluate(rho, D)

        def fe(s, dm=dm, rho=rho, F=F):
            return dm.evaluate(rho + s * F.rate, D, want_ito=False).free_energy

        eps = 1e-3 * rho.min() / np.abs(F.rate).max()  # a relative change of 1e-3 at most
        c1 = (fe(eps) - fe(-eps)) / (2 * eps)
        c2 = (fe(eps / 2) - fe(-eps / 2)) / eps
        rich = (4 * c2 - c1) / 3
        scale = abs(F.free_energy) + abs(F.entropy) + abs(F.energy)
        assert np.all(np.abs(rich - F.free_energy_rate) <= 1e3 * U * scale / eps), norm
        assert np.all(F.free_energy_rate < 0) or norm != "none"


def _residuals(d, norm, dts, T=0.4, **over):
    out = []
    for dt in dts:
        r = simulate(cfg(d, model__normalization=norm, solver__dt=dt, solver__T=T,
                         solver__record_every=int(round(T / dt)), **over))
        assert np.nanmax(r.cfl_substeps) == 1
        assert np.max(np.abs(r.ledger_telescoping)) <= 1e-12
        out.append((r, abs(float(r.free_energy_residual[-1, 0]))))
    return out


def test_free_energy_decreases_for_none_and_its_ledger_closes_at_order_two():
    r"""`none`, tied values, frozen D = I, ascent (clustering against diffusion, β = 2,
    ν = 0.1): the recorded free energy never increases and its rate is negative at every
    record; the free-energy ledger residual falls at order 2 in Δt (Heun), on S¹ and S²."""
    for d in (2, 3):
        runs = _residuals(d, "none", (0.02, 0.01, 0.005))
        for r, _ in runs:
            F = r.free_energy[:, 0]
            assert np.all(np.diff(F) <= 64 * U * np.abs(F).max())
            assert np.all(r.free_energy_rate <= 0)
            np.testing.assert_allclose(r.free_energy, -r.energy + 0.1 * r.entropy, rtol=0,
                                       atol=8 * U * np.abs(r.free_energy).max())
        res = np.array([x for _, x in runs])
        orders = np.log2(res[:-1] / res[1:])
        assert np.all(np.abs(orders - 2) < 0.25), (d, res, orders)


@pytest.mark.parametrize("norm,mob", [("joint", "one"), ("head", "one"), ("joint", "b_hat")])
def test_free_energy_ledger_closes_for_joint_and_head(norm, mob):
    """`joint` and `head` with two random heads, isotropic or b̂-weighted diffusion: the
    chain-rule ledger of F closes at order 2 in Δt (Heun) [model §5b]."""
    res = np.array([x for _, x in _residuals(
        2, norm, (0.004, 0.002, 0.001), T=0.2, model__heads=2,
        init__weights="symmetric_gaussian", density__diffusion_mobility=mob,
        model__beta=1.0)])
    orders = np.log2(res[:-1] / res[1:])
    assert np.all(np.abs(orders - 2) < 0.3), (res, orders)


def test_free_energy_rate_has_a_sign_for_the_gradient_flows_only():
    r"""Random heads (H = 2, 3), random multimodal densities, β, ν and both signs: the
    semi-discrete :math:`d\mathcal F_h/dt` is negative in every draw for `none` with the
    isotropic diffusion and for `joint` with the diffusion of mobility b̂ (the two gradient
    flows of F), and positive in some draws for `joint` with isotropic diffusion and for
    `head` with either: those are not gradient flows of F [model §5b]."""
    g = fv.CircleGrid(128)
    rng = np.random.default_rng(1)
    rates = {(n, mob): [] for n in ("none", "joint", "head") for mob in ("one", "b_hat")}
    for _ in range(150):
        H = int(rng.integers(2, 4))
        A = rng.standard_normal((H, 2, 2))
        D = ((A + A.transpose(0, 2, 1)) * rng.uniform(0.3, 2))[None]
        mu, kap, w = rng.uniform(0, 6.3, 3), rng.uniform(0.5, 8, 3), rng.uniform(0, 1, 3)
        rho = sum(wi * g.cell_averages(lambda th, k=ki, m=mi: von_mises_density(th, k, m))
                  for wi, ki, mi in zip(w, kap, mu))
        rho = (rho / (rho.sum() * g.h))[None]
        beta, nu = float(rng.uniform(0.5, 3)), float(rng.choice([0.02, 0.2, 1.0]))
        for (norm, mob), rs in rates.items():
            for sign in ("ascent", "descent"):
                dm = DensityModel(AttentionModel(beta=beta, normalization=norm, sign=sign), g,
                                  nu=nu, diffusion_mobility=mob)
                rs.append(float(dm.evaluate(rho, D, want_ito=False).free_energy_rate[0]))
    top = {k: max(v) for k, v in rates.items()}
    assert top["none", "one"] < 0 and top["joint", "b_hat"] < 0, top
    assert top["joint", "one"] > 0 and top["head", "one"] > 0 and top["head", "b_hat"] > 0, top


def test_free_energy_series_only_with_diffusion():
    """ν = 0 records no free-energy series (the run is the one of before, bit for bit); ν > 0
    does, and without the ledger its residual is NaN."""
    r0 = simulate(cfg(model__diffusion=0.0))
    assert "free_energy" not in r0.arrays and "free_energy_residual" not in r0.arrays
    r1 = simulate(cfg(diagnostics__ledger=False))
    assert np.all(np.isnan(r1.free_energy_residual)) and np.all(np.isfinite(r1.free_energy))


def test_resume_with_diffusion_is_bit_identical(tmp_path, monkeypatch):
    """A split-diffusion run that dies while writing a checkpoint resumes to records
    bit-identical to an uninterrupted run, the free-energy ledger included (its cumulative
    residual is part of the checkpoint)."""
    import h5py

    from wflow.engine import driver

    c = cfg(density__diffusion_scheme="split", weights__process="ou", solver__T=0.3,
            solver__record_every=3, output__checkpoint_every=4)
    ref = driver.run_to_file(c, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, c, tmp_path / "r.h5", 3)
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("rho", "series/free_energy", "series/free_energy_residual",
                     "series/ledger_residual", "series/entropy"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


# ------------------------------------------------------------------------- split scheme
@pytest.mark.parametrize("d", [2, 3])
def test_split_scheme_steps_at_the_transport_step_and_closes_at_order_two(d):
    r"""``density.diffusion_scheme = "split"`` with ν = 0.5, at steps 1–4× above the diffusive
    limit: one substep (the transport's Courant condition), mass to round-off, ρ > 0, both
    ledgers (E and F) close at order 2 in Δt (Strang), and the final densities converge to
    the explicit scheme's at order ≈ 2 (self-convergence)."""
    res, fin = [], []
    for dt in (0.04, 0.02, 0.01, 0.005):
        r = simulate(cfg(d, density__diffusion_scheme="split", model__diffusion=0.5,
                         solver__method="ssprk3", solver__dt=dt, solver__T=0.4,
                         solver__record_every=int(round(0.4 / dt))))
        assert np.nanmax(r.cfl_substeps) == 1
        assert np.max(np.abs(r.mass - 1)) <= 8 * r.rho.shape[-1] * U and r.rho.min() > 0
        res.append([abs(r.free_energy_residual[-1, 0]), abs(r.ledger_residual[-1, 0])])
        fin.append(r.rho[-1, 0])
    orders = np.log2(np.array(res[:-1]) / res[1:])
    assert np.all(np.abs(orders - 2) < 0.15), orders
    ref = simulate(cfg(d, model__diffusion=0.5, solver__method="ssprk3", solver__dt=0.0025,
                       solver__T=0.4, solver__record_every=160)).rho[-1, 0]
    err = np.array([np.abs(f - ref).max() for f in fin])
    assert np.all(np.abs(np.log2(err[:-1] / err[1:]) - 2) < 0.3), err


def test_split_diffusion_half_steps_solve_the_heat_equation():
    r""":meth:`DensityModel.diffuse` over τ = 1 (many sub-cycles) is the semi-discrete heat flow:
    on S¹ the Fourier mode decays by :math:`e^{-\nu\lambda_h\tau}`, :math:`\lambda_h = (2 -
    2\cos kh)/h^2`, to the sub-cycles' time error (SSP-RK3 at the step cfl·h²/ν: relative
    :math:`O((\nu\lambda_h\Delta t)^3)` per step, below 1e-6 here)."""
    g = fv.CircleGrid(64)
    dm = DensityModel(AttentionModel(beta=1.0), g, nu=0.2, diffusion_scheme="split")
    assert dm.split
    k = 3
    rho = g.cell_averages(lambda th: (1 + 0.5 * np.cos(k * th)) / (2 * np.pi))[None]
    out = dm.diffuse(rho, 1.0)
    lam = (2 - 2 * np.cos(k * g.h)) / g.h**2
    exact = 1 / (2 * np.pi) + (rho - 1 / (2 * np.pi)) * np.exp(-0.2 * lam)
    assert np.abs(out - exact).max() <= 1e-6 * 0.5 / (2 * np.pi)
    assert abs(g.masses(out).sum() - 1) <= 8 * 64 * U


# ------------------------------------------------------------------------- initial densities
def test_uniform_mode_starts():
    """uniform_mode: the cell averages of (1 + ε cos kθ)/2π on S¹ to quadrature accuracy;
    (1 + ε Ỹ_lm)/4π at the centres on S² scaled to mass 1; the default weights' run starts
    from them."""
    g = fv.CircleGrid(32)
    ini = {"tokens": "uniform_mode", "mode": 3, "mode_m": 0, "amplitude": 0.2, "seed": 0}
    rho = initial_density(ini, g)
    a, b = g.h * np.arange(32), g.h * np.arange(1, 33)
    exact = (1 + 0.2 * (np.sin(3 * b) - np.sin(3 * a)) / (3 * g.h)) / (2 * np.pi)
    assert np.abs(rho - exact).max() <= 1e-14
    mesh = voronoi_mesh(200)
    ini.update(mode=2, mode_m=-1)
    rho = initial_density(ini, mesh)
    assert abs(mesh.areas @ rho - 1) <= 64 * U
    Y = real_harmonic(2, -1, mesh.centres)
    assert np.corrcoef(rho, Y)[0, 1] > 0.9999
    r = simulate(cfg(3, init__tokens="uniform_mode", init__mode=2, init__mode_m=-1,
                     init__amplitude=0.2, density__cells=200, solver__T=0.02,
                     solver__record_every=1))
    np.testing.assert_array_equal(r.rho[0, 0], rho)


def test_uniform_noise_is_defined_independently_of_the_mesh():
    r"""uniform_noise: one seeded random series, whatever the mesh. Averaging the fine cells
    of N = 128 in pairs gives the cells of N = 64 to quadrature accuracy; another seed gives
    another start; the pointwise variance is ε² (mean over 400 seeds of the mean square on a
    fine grid, within 5 standard errors)."""
    ini = {"tokens": "uniform_noise", "amplitude": 0.1, "noise_modes": 6, "seed": 3}
    fine = initial_density(ini, fv.CircleGrid(128))
    coarse = initial_density(ini, fv.CircleGrid(64))
    assert np.abs(fine.reshape(-1, 2).mean(axis=1) - coarse).max() <= 1e-14
    assert np.abs(initial_density({**ini, "seed": 4}, fv.CircleGrid(64)) - coarse).max() > 1e-4
    th = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    ms = np.array([np.mean(perturbation({**ini, "seed": s}, 2)(th) ** 2) for s in range(400)])
    assert abs(ms.mean() - 0.01) <= 5 * ms.std() / np.sqrt(len(ms))
    x = voronoi_mesh(400).centres
    ms = np.array([np.mean(perturbation({**ini, "noise_modes": 3, "seed": s}, 3)(x) ** 2)
                   for s in range(200)])
    assert abs(ms.mean() - 0.01) <= 5 * ms.std() / np.sqrt(len(ms)) + 0.01 * 0.05


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("over,key", [
    ({"model__diffusion": -0.1}, "model.diffusion"),
    ({"solver__representation": "particles", "init__tokens": "uniform"}, "model.diffusion"),
    # (particles with Heun: token noise needs a scheme with a stated SDE order, [model §6b])
    ({"solver__representation": "particles", "model__diffusion": 0.0}, "init.tokens"),
    ({"init__tokens": "uniform_mode", "init__mode_m": 1}, "init.mode_m"),
    ({"init__tokens": "uniform_mode", "init__mode": 0}, "init.mode"),
    ({"init__tokens": "uniform_mode", "init__amplitude": 1.5}, "init.amplitude"),
    ({"init__noise_modes": 0}, "init.noise_modes"),
    ({"density__diffusion_scheme": "implicit"}, "density.diffusion_scheme"),
    ({"density__diffusion_scheme": "split", "density__diffusion_mobility": "b_hat"},
     "density.diffusion_mobility"),
])
def test_bad_input_one_line_naming_the_key(over, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as exc:
        simulate(cfg(**over))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("method", ["euler", "heun", "ssprk3"])
def test_a_density_diffuses_with_every_ssp_scheme_and_draws_no_token_noise(method):
    """ν > 0 is the density's flux, not token noise: every SSP scheme validates, and the run
    has one generator per path (the weight noise), none from the token-noise streams (6, p)."""
    sim = Simulation(cfg(solver__method=method, solver__paths=2), explicit=())
    assert sim.n_streams == 2 and sim.model.nu == 0.1


def test_cli_exit_2_on_negative_diffusion(tmp_path, capsys):
    rc = main(["run", "--set", "model.diffusion=-1", "-o", str(tmp_path / "o.h5"), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.split("\n")) == 1 and "model.diffusion" in err
