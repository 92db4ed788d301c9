"""The Voronoi finite-volume mesh of S² and first-order upwind transport [model §5b]."""

import numpy as np
import pytest

from wflow.geometry import sphere_mesh as sm

EPS = np.finfo(float).eps


def _rotation(w):
    w = np.asarray(w, dtype=float) / np.linalg.norm(w)
    return w, np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


@pytest.fixture(scope="module")
def mesh():
    return sm.voronoi_mesh(600)


def test_mesh_geometry(mesh):
    # areas tile the sphere; every cell has ≥ 3 edges; Euler: V − E + F = 2
    assert abs(mesh.areas.sum() - 4 * np.pi) < 64 * EPS * 4 * np.pi
    assert mesh.vertices.shape[0] - mesh.edges.shape[0] + mesh.N == 2
    assert np.all(np.bincount(mesh.edges.ravel(), minlength=mesh.N) >= 3)
    # the normal n_ij is tangent along the whole arc (the arc lies in the bisector plane)
    assert np.abs(np.einsum("ea,ea->e", mesh.normals, mesh.midpoints)).max() < 8 * EPS
    # the arc moment against quadrature: ∫ p dℓ by a 64-point Gauss rule on each arc
    V = mesh.vertices
    s, wq = np.polynomial.legendre.leggauss(32)
    for e in (0, 7, mesh.edges.shape[0] - 1):
        a, b = mesh.edge_vertices[e]
        theta = mesh.lengths[e]
        u = V[b] - (V[a] @ V[b]) * V[a]
        u /= np.linalg.norm(u)
        t = 0.5 * theta * (s + 1)
        quad = 0.5 * theta * (wq @ (np.cos(t)[:, None] * V[a] + np.sin(t)[:, None] * u))
        assert np.allclose(mesh.moments[e], quad, rtol=0, atol=16 * EPS * theta)
        # the arc is the shared edge: its ends are equidistant from both generators
        i, j = mesh.edges[e]
        assert np.abs(V[[a, b]] @ (mesh.centres[j] - mesh.centres[i])).max() < 64 * EPS


def test_lloyd_moves_generators_to_centroids():
    def worst(m):
        return max(np.arccos(min(1.0, sm._centroid(m.vertices[r], c) @ c))
                   for r, c in zip(m.regions, m.centres))

    d0, d3 = worst(sm.voronoi_mesh(300)), worst(sm.voronoi_mesh(300, lloyd=3))
    assert d3 < 0.5 * d0


def test_rotation_is_divergence_free_and_conserves_mass(mesh):
    _, A = _rotation([0.3, -0.2, 1.0])
    phi = sm.edge_fluxes_linear(mesh, A)
    # exact edge integrals: a constant density stays constant to round-off
    scale = np.abs(phi).max() / mesh.areas.min() * 8
    assert np.abs(sm.upwind_rhs(mesh, np.ones(mesh.N), phi)).max() < 64 * EPS * scale
    rng = np.random.default_rng(1)
    rho = rng.random(mesh.N)
    rhs = sm.upwind_rhs(mesh, rho, phi)
    assert abs(mesh.areas @ rhs) < 64 * EPS * np.sum(np.abs(phi)) * rho.max()
    # batched densities give the same rows
    both = sm.upwind_rhs(mesh, np.stack([rho, 2 * rho]), phi)
    assert np.array_equal(both[0], rhs) and np.allclose(both[1], 2 * rhs, rtol=0, atol=1e-13)


def _one_period(N, kappa=2.0, cfl=0.5):
    m = sm.voronoi_mesh(N)
    w, A = _rotation([0.3, -0.2, 1.0])
    phi = sm.edge_fluxes_linear(m, A)
    x0 = np.cross(w, [1.0, 0.0, 0.0])
    x0 /= np.linalg.norm(x0)
    rho0 = np.exp(kappa * (m.centres @ x0 - 1))
    T = 2 * np.pi
    steps = int(np.ceil(T / sm.cfl_dt(m, phi, cfl)))
    dt = T / steps
    r = rho0.copy()
    lo = np.inf
    for _ in range(steps):  # SSP-RK2 (Heun)
        y = r + dt * sm.upwind_rhs(m, r, phi)
        r = 0.5 * (r + y + dt * sm.upwind_rhs(m, y, phi))
        lo = min(lo, r.min())
    mass0 = m.areas @ rho0
    c0, c1 = (m.areas * rho0) @ m.centres, (m.areas * r) @ m.centres
    ang = np.arctan2(np.linalg.norm(np.cross(c0, c1)), c0 @ c1)
    return m.h, m.areas @ np.abs(r - rho0) / mass0, (m.areas @ r - mass0) / mass0, lo, ang, steps


def test_solid_body_rotation_returns_the_bump_after_one_period():
    """A bump carried once around by u = ω × x comes back: mass to round-off, ρ ≥ 0 at every
    step (CFL 0.5), the centre of mass within O(h), and the L¹ error falls with h at the
    order of first-order upwinding on an irregular mesh (≥ 1/2, Peterson's bound; measured
    ≈ 0.75 for N = 1000 → 4000)."""
    res = [_one_period(N) for N in (1000, 2000, 4000)]
    for h, _err, dmass, lo, ang, steps in res:
        assert abs(dmass) < 8 * EPS * steps
        assert lo >= 0.0
        assert ang < h  # the bump's centre of mass returns within one mesh size
    h = np.array([r[0] for r in res])
    e = np.array([r[1] for r in res])
    order = np.polyfit(np.log(h), np.log(e), 1)[0]
    assert 0.5 < order < 1.5, order
    assert np.all(np.diff(e) < 0)


def test_cfl_step_keeps_forward_euler_positive(mesh):
    _, A = _rotation([1.0, 1.0, 0.0])
    phi = sm.edge_fluxes_linear(mesh, A)
    dt = sm.cfl_dt(mesh, phi, cfl=1.0)
    rho = np.zeros(mesh.N)
    rho[::7] = 1.0  # a rough density: the worst case for positivity
    assert (rho + dt * sm.upwind_rhs(mesh, rho, phi)).min() >= -16 * EPS
    # twice the CFL step goes negative for this data: the bound is not vacuous
    assert (rho + 2.5 * dt * sm.upwind_rhs(mesh, rho, phi)).min() < 0


def test_midpoint_fluxes_converge_to_exact(mesh):
    _, A = _rotation([0.0, 0.6, 0.8])
    exact = sm.edge_fluxes_linear(mesh, A)
    mid = sm.edge_fluxes_midpoint(mesh, mesh.midpoints @ A.T)
    # midpoint rule on an arc of angle θ: relative error O(θ²)
    assert np.all(np.abs(mid - exact) <= mesh.lengths**3 * np.abs(A).max() + 1e-15)


def test_bad_sizes():
    with pytest.raises(ValueError, match="N = 3"):
        sm.fibonacci_sphere(3)


# ------------------------------------------------------------------ the density on S² [model §5b]
def _s2_config(dt, T=0.4, **kw):
    cfg = {"model": {"d": 3, "heads": 2, "beta": 1.0}, "init": {"tokens": "vmf", "kappa": 2.0},
           "weights": {"process": "frozen"},
           "solver": {"representation": "density", "method": "heun", "dt": dt, "T": T,
                      "record_every": 2},
           "density": {"cells": 300}, "diagnostics": {"ledger": True},
           "output": {"store_tokens": False}}
    for k, v in kw.items():
        sec, key = k.split(".")
        cfg.setdefault(sec, {})[key] = v
    return cfg


def test_s2_density_discrete_chain_rule():
    """E is quadratic in the masses, so a central difference along ṁ is exact:
    dE/dt = Σ Φ_k ṁ_k = σ𝒟_h to round-off (frozen weights), while the cell quadrature
    Σ m⟨g, v⟩ of the kernel differs at the scheme's order."""
    from wflow.engine.run import Simulation

    sim = Simulation(_s2_config(0.01, **{"model.sign": "ascent"}), explicit=())
    dm = sim.model
    rho, D = sim.X0, sim.D0
    F = dm.evaluate(rho, D)
    mdot = dm.grid.masses(F.rate)
    eps = 1e-3

    def energy(r):
        return dm.evaluate(r, D, want_ito=False).energy

    dEdt = (energy(rho + eps * F.rate) - energy(rho - eps * F.rate)) / (2 * eps)
    scale = np.sum(np.abs(mdot)) * np.abs(F.partition).max() / dm.beta
    assert np.all(np.abs(dEdt - dm.sigma * F.dissipation) < 1e3 * EPS * scale)
    assert np.all(np.abs(F.dissipation - F.dissipation_cells) > 1e5 * EPS * scale)


def test_s2_density_run_mass_positivity_and_ledger_order():
    import wflow

    res = []
    for dt in (0.02, 0.01):
        r = wflow.simulate(_s2_config(dt))
        mass = np.asarray(r["mass"])
        assert np.abs(mass - 1).max() < 64 * EPS * 300
        assert np.nanmin(r["rho_min"]) >= 0
        assert np.abs(r["ledger_telescoping"]).max() < 1e-12
        res.append(abs(float(r["ledger_residual"][-1, 0])))
    order = np.log2(res[0] / res[1])
    assert 1.8 < order < 2.2, (res, order)  # Heun: min(p, 2) = 2 [model §6]


def test_s2_density_config_errors():
    import wflow

    with pytest.raises(wflow.ConfigError, match="model.d"):
        wflow.simulate(_s2_config(0.01, **{"model.d": 4}))


def test_s2_density_figure(tmp_path):
    """The coloured-mesh figure of an S² density run: one PNG, the mesh rebuilt from the
    file's configuration (same cell count as rho)."""
    from wflow.engine.driver import run_to_file
    from wflow.figures import plotting

    cfg = _s2_config(0.05, T=0.2, **{"density.cells": 120, "output.store_tokens": True})
    run_to_file(cfg, tmp_path / "s2.h5")
    files = plotting.plot(tmp_path / "s2.h5", "density", tmp_path / "fig", formats=("png",))
    assert [f.name for f in files] == ["density.png"]
    assert 10_000 < files[0].stat().st_size < 300_000
