"""The density representation through the spectral summation [model §2s, §5b]: the field of
the cell masses, one density step and a whole run agree with the direct weighted pass within
the consequences of the tolerance; mass is conserved to round-off.

The bounds: the spectral route keeps Z_h and the attention average x̄_h within ``tol`` of
the direct sums at every target (relative, and relative to |x| = 1), so with tied values
(V_h = D_h) |Δv| ≤ max‖D_h‖ tol for ``head`` and ≤ 2 max Z ‖D_h‖ tol for ``none``
(Δ(Z w) = ΔZ w + Z Δw, |w_h| ≤ ‖D_h‖). The fluxes are 1-Lipschitz in the face speed times
the largest cell average, so |Δρ̇_k| ≤ 2 max ρ |Δv| / h on S¹ and
≤ max ρ Σ_j |Γ_kj| |Δv| / |K_k| on S²."""

import numpy as np
import pytest

from wflow.engine.run import simulate
from wflow.errors import ConfigError
from wflow.geometry import circle_fv as fv
from wflow.geometry.sphere_mesh import voronoi_mesh
from wflow.model.attention import AttentionModel
from wflow.model.density import DensityModel, von_mises_density
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext

TOL = 1e-10
U = np.finfo(float).eps / 2


def _weights(kind, d, H, seed):
    """(H, d, d): norm-1 symmetric indefinite or general (non-symmetric) matrices, D_0 = I."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((H, d, d))
    if kind == "symmetric":
        A = A + np.swapaxes(A, 1, 2)
    A = A / np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    A[0] = np.eye(d)
    return A


def _mesh(d):
    return fv.CircleGrid(192) if d == 2 else voronoi_mesh(600)


def _density(mesh, d):
    """A two-bump density with empty cells (zero masses), mass 1."""
    if d == 2:
        th = mesh.theta
        rho = von_mises_density(th, 6.0, 0.5) + 0.5 * von_mises_density(th, 3.0, 3.0)
        rho[20:40] = 0.0
        return (rho / np.sum(mesh.masses(rho)))[None]
    x = mesh.centres
    rho = np.exp(6.0 * (x[:, 2] - 1.0)) + 0.5 * np.exp(3.0 * (x[:, 0] - 1.0))
    rho[x[:, 1] > 0.8] = 0.0
    return (rho / np.sum(mesh.masses(rho)))[None]


def _rate_bound(mesh, rho, dv):
    """|Δρ̇| per cell from a velocity difference dv at every centre (module docstring)."""
    if isinstance(mesh, fv.CircleGrid):
        return np.full(mesh.N, 2.0 * rho.max() * dv / mesh.h)
    perim = np.zeros(mesh.N)
    np.add.at(perim, mesh.edges[:, 0], mesh.lengths)
    np.add.at(perim, mesh.edges[:, 1], mesh.lengths)
    return rho.max() * perim * dv / mesh.areas


def _models(mesh, kind, norm, nu, sign="descent"):
    inter = "general" if kind == "general" else "symmetric"
    out = []
    for summation in ("direct", "spectral"):
        m = AttentionModel(beta=3.0, normalization=norm, sign=sign, interaction=inter,
                           summation=summation, tol=TOL, max_flagged=1.0)
        out.append(DensityModel(m, mesh, nu=nu))
    return out


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kind", ["symmetric", "general"])
@pytest.mark.parametrize("norm", ["head", "none"])
def test_density_field_through_the_spectral_sums(d, kind, norm):
    """Z, v, b̂ and ρ̇ of a density (zero-mass cells included, ν > 0) through the spectral
    sums within the bounds of the tolerance of the direct weighted pass; with symmetric D
    the energy, the Itô sum and the scheme's dissipation too."""
    mesh = _mesh(d)
    rho = _density(mesh, d)
    D = _weights(kind, d, 2, seed=d)[None]
    direct, spectral = _models(mesh, kind, norm, nu=0.05)
    A = direct.evaluate(rho, D)
    B = spectral.evaluate(rho, D)
    assert np.max(np.abs(B.partition / A.partition - 1)) <= TOL
    assert np.max(np.abs(B.b_hat / A.b_hat - 1)) <= TOL
    zmax = 1.0 if norm == "head" else 2.0 * float(np.max(A.partition))
    dv_bound = 2 * zmax * TOL  # ‖D_h‖ = 1; 2: the combine's own rounding
    dv = np.max(np.abs(B.velocity - A.velocity))
    assert dv <= dv_bound
    bound = _rate_bound(mesh, rho[0], dv_bound)
    assert np.all(np.abs(B.rate - A.rate)[0] <= bound + 64 * U * np.abs(A.rate)[0].max())
    if kind == "symmetric":
        assert abs(B.energy[0] / A.energy[0] - 1) <= TOL
        assert abs(B.ito_sum[0] / A.ito_sum[0] - 1) <= TOL
        # 𝒟_h = σ Σ F ΔΦ: ΔF from the rate bound's face term, ΔΦ = Δ(Σ_h Z_h)/(βH) ≤ tol Φ
        Phi = A.partition[0].mean(axis=0) / 3.0
        faces = mesh.N if d == 2 else len(mesh.edges)
        dD = (np.max(np.abs(A.flux)) * 2 * TOL * np.max(Phi) * faces
              + np.max(bound) * np.max(Phi) * faces * (mesh.h if d == 2 else np.max(mesh.areas)))
        assert abs(B.dissipation[0] - A.dissipation[0]) <= dD


@pytest.mark.parametrize("d", [2, 3])
def test_one_density_step(d):
    """One SSP-RK3 step (ascent, ν > 0, symmetric indefinite D) through the spectral sums:
    within Δt × the rate bound of the direct step's cell averages (every stage is a convex
    combination of Euler steps), and the mass conserved to round-off."""
    mesh = _mesh(d)
    rho = _density(mesh, d)
    D = _weights("symmetric", d, 2, seed=5)[None]
    out = []
    for dm in _models(mesh, "symmetric", "head", nu=0.05, sign="ascent"):
        F = dm.evaluate(rho, D, want_ito=False)
        dt = 0.5 * float(F.max_dt[0])
        ctx = StepContext(X=rho, dt=dt, sigma=dm.sigma, k1=F.rate, max_dt=F.max_dt,
                          velocity=lambda r, dm=dm: dm.rate(r, D))
        r1, info = DensityStepper("ssprk3").step(ctx)
        assert info["cfl_substeps"][0] == 1
        m0, m1 = np.sum(mesh.masses(rho)), np.sum(mesh.masses(r1))
        assert abs(m1 - m0) <= 4 * mesh.N * U
        out.append(r1[0])
    # the stages' cell averages stay within max ρ (1 + O(Δt)): the bound at 2 max ρ
    bound = dt * _rate_bound(mesh, 2 * rho[0], 2 * TOL)
    assert np.all(np.abs(out[1] - out[0]) <= bound + 8 * U * rho.max())


def _run_cfg(d, summation, **solver):
    return {"model": {"d": d, "heads": 2, "beta": 2.0, "normalization": "none",
                      "diffusion": 0.02},
            "init": {"tokens": "vmf", "kappa": 3.0, "weights": "identity"},
            "weights": {"process": "ou", "noise_var": 0.1},
            "solver": {"representation": "density", "method": "heun", "dt": 0.02, "T": 0.1,
                       "record_every": 1, "paths": 1, "summation": summation, **solver},
            "density": {"cells": 96 if d == 2 else 300},
            "diagnostics": {"ledger": True}}


@pytest.mark.parametrize("d", [2, 3])
def test_density_run_spectral_equals_direct(d):
    """``solver.summation = "spectral"`` for a density run (OU weights, ν > 0, the ledger):
    the series of the direct run within the tolerance's consequences, and the mass conserved
    to round-off.

    Per evaluation |Δv| ≤ 2 max Z max‖D‖ tol (``none``, tied values; Z ≤ e^{β max‖D‖} for
    mass 1), hence the rate bound b of the module docstring; a step at Courant number ≤ 1/2
    (transport and diffusion) amplifies a difference of ρ by at most 3, so after K steps
    |Δρ| ≤ T b 3^K, and the energy (quadratic in the masses, Z ≤ e^{β max‖D‖}) differs by
    at most tol E + 2 max Z |Δρ| |S^{d-1}| / β."""
    a = simulate(_run_cfg(d, "direct"))
    b = simulate(_run_cfg(d, "spectral"))
    K = a.rho.shape[0] - 1
    mesh = fv.CircleGrid(96) if d == 2 else voronoi_mesh(300)
    beta, dmax = 2.0, 1.5  # OU about I with g² = 0.1 over T = 0.1: ‖D_h‖ < 1.5
    zmax = np.exp(beta * dmax)
    b_rate = np.max(_rate_bound(mesh, np.max(a.rho, axis=(0, 1)), 2 * zmax * dmax * TOL))
    drho = 0.1 * b_rate * 3.0 ** K
    assert np.max(np.abs(b.rho - a.rho)) <= drho
    area = 2 * np.pi if d == 2 else 4 * np.pi
    dE = TOL * np.abs(a.energy) + 2 * zmax * drho * area / beta
    assert np.all(np.abs(b.energy - a.energy) <= dE)
    assert np.max(np.abs(b.mass - 1.0)) <= 4 * mesh.N * U
    assert np.max(np.abs(a.mass - 1.0)) <= 4 * mesh.N * U


def test_auto_takes_the_cells():
    """``solver.summation = "auto"`` for a density counts the cells (density.cells), not
    model.n, against the density crossover."""
    from wflow.config import resolve
    from wflow.model.spectral import AUTO_MIN_CELLS, run_summation

    for d in (2, 3):
        big = resolve(_run_cfg(d, "auto"), [f"density.cells={AUTO_MIN_CELLS[d]}",
                                            "model.n=8"])
        small = resolve(_run_cfg(d, "auto"), [f"density.cells={AUTO_MIN_CELLS[d] - 1}",
                                              "model.n=1000000"])
        assert run_summation(big) == "spectral"
        assert run_summation(small) == "direct"


def test_density_suite_rows():
    """The ``density`` benchmark rows: the results schema, both routes timed, the ratio of
    their seconds."""
    from benchmarks.results import SCHEMA
    from benchmarks.suites import density_suite

    rows = density_suite(cells=(128,), spheres=(2,), repeats=1)
    assert len(rows) == 1 and tuple(rows[0]) == SCHEMA["row"]
    data = rows[0]["data"]
    assert data["spectral_s"] > 0 and data["direct_s"] > 0 and data["flagged"] == 0.0
    assert rows[0]["ratio"] == pytest.approx(data["direct_s"] / data["spectral_s"])


@pytest.mark.parametrize("d", [2, 3])
def test_a_density_run_records_the_summation_report(d):
    """A finite-volume density run through the spectral sums records the summation's report
    (flagged fraction in [0, max_flagged], the degree of the tail rule), as particles do."""
    r = simulate({"model": {"d": d, "heads": 2}, "init": {"tokens": "uniform_mode"},
                  "solver": {"representation": "density", "summation": "spectral", "T": 0.03,
                             "paths": 1}, "density": {"cells": 256}})
    flagged, degree = np.asarray(r["spectral_flagged"]), np.asarray(r["spectral_degree"])
    assert flagged.shape == degree.shape == (len(r["t"]), 1)
    assert np.all((0 <= flagged) & (flagged <= 0.1)) and np.all(degree >= 2)


def test_the_spectral_representation_refuses_the_spectral_sums():
    """The spectral density computes its field on its quadrature grid: the summation key is
    refused there in one line."""
    cfg = {"model": {"d": 2, "heads": 1}, "init": {"tokens": "uniform_mode"},
           "solver": {"representation": "density", "summation": "spectral", "T": 0.02},
           "density": {"representation": "spectral", "degree": 8}}
    with pytest.raises(ConfigError, match="solver.summation = 'spectral'.*own quadrature"):
        simulate(cfg)
