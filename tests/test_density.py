"""The density representation on S¹ [model §5b]: finite volumes, the field of a density, the
discrete chain rule, the ledger, convergence in h, and the engine switch."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import i0e, i1e
from test_io import crash_in_checkpoint

from wflow.engine.run import simulate
from wflow.errors import ConfigError, NumericalError
from wflow.geometry import circle_fv as fv
from wflow.model.attention import AttentionModel
from wflow.model.density import DensityModel, von_mises_density
from wflow.stepping.density import DensityStepper
from wflow.stepping.integrators import StepContext

U = np.finfo(float).eps / 2


def vm_cells(grid, kappa, mu=0.0):
    return grid.cell_averages(lambda th: von_mises_density(th, kappa, mu))[None]


def density_cfg(**over):
    cfg = {"model": {"d": 2, "heads": 3, "n": 8},
           "init": {"tokens": "vmf", "kappa": 4.0},
           "weights": {"process": "ou"},
           "solver": {"representation": "density", "method": "ssprk3", "dt": 0.02, "T": 0.4,
                      "record_every": 5, "paths": 2},
           "density": {"cells": 64},
           "diagnostics": {"ledger": True}}
    for key, val in over.items():
        sec, k = key.split("__")
        cfg.setdefault(sec, {})[k] = val
    return cfg


def solve(N, limiter, T=0.25, kappa=2.0, sign="descent", method="ssprk3", courant=0.2):
    """ρ(T) on N cells from a von Mises start, D = I frozen, dt = courant · h."""
    g = fv.CircleGrid(N)
    dm = DensityModel(AttentionModel(beta=1.0, sign=sign), g, limiter=limiter)
    D = np.eye(2)[None, None]
    rho = vm_cells(g, kappa)
    nsteps = int(round(T / (courant * g.h)))
    st = DensityStepper(method)
    for _ in range(nsteps):
        F = dm.evaluate(rho, D, want_ito=False)
        rho, info = st.step(StepContext(X=rho, dt=T / nsteps, sigma=dm.sigma, k1=F.rate,
                                        max_dt=F.max_dt, velocity=lambda r: dm.rate(r, D)))
        assert info["cfl_substeps"][0] == 1
    return rho[0]


def observed_orders(Ns, limiter, sign):
    """Orders of the differences of successive grids (the fine solution averaged onto the
    coarse cells), in L¹ and L∞."""
    sols = {N: solve(N, limiter, sign=sign) for N in Ns}
    e1, ei = [], []
    for a, b in zip(Ns[:-1], Ns[1:]):
        diff = sols[b].reshape(-1, 2).mean(axis=1) - sols[a]
        e1.append(np.abs(diff).sum() * 2 * np.pi / a)
        ei.append(np.abs(diff).max())
    return np.log2(np.array(e1[:-1]) / e1[1:]), np.log2(np.array(ei[:-1]) / ei[1:])


# ------------------------------------------------------------------------- finite volumes
def test_mass_conservation_and_positivity():
    """Σ m_k stays 1 to round-off and ρ ≥ 0, for a steep start (κ = 40, cells of ~2 widths of
    the bump) under ascent (concentration), OU weights, 3 heads with a Laplacian head, every
    TVD limiter; the unlimited slope does go negative, and the run stops with a clear error."""
    for lim in ("minmod", "van_leer", "mc"):
        r = simulate(density_cfg(init__kappa=40.0, model__sign="ascent", density__limiter=lim,
                                 model__laplacian_heads=[2], density__cells=48))
        N = r.rho.shape[-1]
        assert np.max(np.abs(r.mass - 1.0)) <= 4 * N * U
        assert np.all(r.rho >= 0.0), lim
        assert np.nanmin(r.rho_min) >= 0.0
    with pytest.raises(NumericalError, match="negative cell average"):
        simulate(density_cfg(init__kappa=40.0, model__sign="ascent", density__limiter="none",
                             density__cells=48))


def test_limiters_are_tvd_and_exact_on_lines():
    """Face values lie between the neighbouring averages (TVD limiters), and every limiter
    reproduces a monotone linear profile exactly away from the periodic seam."""
    rng = np.random.default_rng(3)
    rho = rng.random((2, 40))
    for lim in ("minmod", "van_leer", "mc"):
        L, R = fv.face_values(rho, lim)
        lo = np.minimum(rho, np.roll(rho, -1, axis=-1))
        hi = np.maximum(rho, np.roll(rho, -1, axis=-1))
        for face in (L, R):
            assert np.all(face >= lo - 1e-15) and np.all(face <= hi + 1e-15)
        line = np.arange(10.0)[None]
        s = fv.limited_slopes(line, lim)
        assert np.allclose(s[0, 1:-1], 1.0, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="limiter"):
        fv.limited_slopes(rho, "superbee2")


@pytest.mark.parametrize("shape", [(7,), (3, 40)])
def test_periodic_neighbours_wrap_around_the_seam(shape):
    """The face and cell differences use the periodic neighbours (cell N−1 next to cell 0):
    the same numbers as written with ``np.roll``, bit for bit, at every cell and face."""
    rng = np.random.default_rng(5)
    a, F, Phi = rng.random(shape), rng.standard_normal(shape), rng.standard_normal(shape)
    nxt, prv = np.roll(a, -1, axis=-1), np.roll(a, 1, axis=-1)
    assert np.array_equal(fv.face_speeds(a), 0.5 * (a + nxt))
    assert np.array_equal(fv.flux_divergence(F, 0.1), -(F - np.roll(F, 1, axis=-1)) / 0.1)
    assert np.array_equal(fv.diffusion_flux(a, 0.1, 0.3), -0.3 * (nxt - a) / 0.1)
    assert np.array_equal(fv.discrete_dissipation(F, Phi, -1.0),
                          -1.0 * np.sum(F * (np.roll(Phi, -1, axis=-1) - Phi), axis=-1))
    s = fv.limited_slopes(a, "none")
    assert np.array_equal(s, 0.5 * ((a - prv) + (nxt - a)))
    assert np.array_equal(fv.face_values(a, "none")[1], np.roll(a - 0.5 * s, -1, axis=-1))


# ------------------------------------------------------------------------- the field
@pytest.mark.parametrize("normalization", ["head", "none"])
def test_von_mises_field_closed_form(normalization):
    r"""D = I (β-scaled identity), ρ von Mises(κ): with :math:`r(\theta) =
    |\beta e^{i\theta} + \kappa|`, :math:`Z(\theta) = I_0(r)/I_0(\kappa)` and the angular
    attention velocity :math:`u = -\kappa\sin\theta\, I_1(r)/(r I_0(r))` (times Z for
    ``none``). The cell-centre field of the weighted kernel converges to it at order 2 in h
    (midpoint quadrature of cell masses) and is within 3·10⁻⁴ at N = 128."""
    beta, kappa = 1.5, 2.0
    errs = []
    for N in (32, 64, 128):
        g = fv.CircleGrid(N)
        dm = DensityModel(AttentionModel(beta=beta, normalization=normalization), g)
        F = dm.evaluate(vm_cells(g, kappa), np.eye(2)[None, None])
        th = g.theta
        r = np.sqrt(beta**2 + kappa**2 + 2 * beta * kappa * np.cos(th))
        Z = i0e(r) / i0e(kappa) * np.exp(r - kappa)
        u = -kappa * np.sin(th) * i1e(r) / (i0e(r) * r)
        if normalization == "none":
            u = Z * u
        uk = np.einsum("pka,ka->pk", F.velocity, g.tangents)[0]
        normal = np.einsum("pka,ka->pk", F.velocity, g.centres)[0]
        assert np.max(np.abs(normal)) <= 1e-14  # tangent
        errs.append((np.max(np.abs(F.partition[0, 0] - Z)), np.max(np.abs(uk - u))))
    errs = np.array(errs)
    orders = np.log2(errs[:-1] / errs[1:])
    assert np.all(orders > 1.9) and np.all(orders < 2.1), orders
    assert errs[-1].max() < 3e-4


# ------------------------------------------------------------------------- chain rule
@pytest.mark.parametrize("normalization", ["head", "joint", "none"])
def test_discrete_chain_rule(normalization):
    r"""Frozen weights: :math:`dE/dt = \sigma\mathcal D_h` of the semi-discrete system to
    round-off. E is quadratic in the masses, so the central difference
    :math:`(E(\rho + \epsilon\dot\rho) - E(\rho - \epsilon\dot\rho))/2\epsilon` *is* the
    derivative; its only error is the rounding of E, ≈ u|E|/ε. Random heads, a Laplacian
    head, untied values, both signs. The kernel's cell quadrature Σ m⟨g, v⟩ misses it by
    O(h²) ≫ round-off (so the check can fail)."""
    rng = np.random.default_rng(11)
    g = fv.CircleGrid(96)
    A = rng.standard_normal((3, 2, 2))
    D = (A + A.transpose(0, 2, 1))[None] * 0.7
    rho = vm_cells(g, 3.0, 1.0) + 0.5 * vm_cells(g, 8.0, 4.0)
    rho /= rho.sum() * g.h
    eps = 1e-3
    for sign in ("descent", "ascent"):
        for values in (None, rng.standard_normal((3, 2, 2))):
            m = AttentionModel(beta=1.3, normalization=normalization, sign=sign,
                               laplacian_heads=(1,), values=values)
            dm = DensityModel(m, g)
            F = dm.evaluate(rho, D)
            Ep = dm.evaluate(rho + eps * F.rate, D).energy
            Em = dm.evaluate(rho - eps * F.rate, D).energy
            dEdt = (Ep - Em) / (2 * eps)
            tol = 64 * U * F.energy / eps + 64 * U * np.abs(F.flux).sum() * F.energy
            assert abs(dEdt - dm.sigma * F.dissipation) <= tol
            assert abs(dEdt - dm.sigma * F.dissipation_cells) > 100 * tol


@pytest.mark.parametrize("method,order,process", [
    ("euler", 1, "frozen"), ("heun", 2, "frozen"), ("ssprk3", 2, "frozen"),
    ("ssprk3", 2, "oscillating"), ("heun", 2, "ou")])
def test_ledger_residual_order(method, order, process):
    """The exact ledger residual R → 0 at order min(p, 2) in Δt ([model §6]) for frozen,
    deterministic time-dependent (oscillating) and OU weights (one density per path, the
    mean of |R| over 4 paths: each step freezes D_k, so the local error is O(Δt³) whatever
    the path); the telescoping check to round-off."""
    extra = {"weights__noise_var": 0.0} if process == "oscillating" else {}
    res = []
    for dt in (0.02, 0.01, 0.005):
        r = simulate(density_cfg(weights__process=process, solver__method=method,
                                 solver__dt=dt, solver__T=0.4, solver__record_every=10,
                                 solver__paths=4 if process == "ou" else 1,
                                 density__cells=48, **extra))
        assert np.nanmax(r.cfl_substeps) == 1
        assert np.max(np.abs(r.ledger_telescoping)) <= 1e-13
        res.append(np.mean(np.abs(r.ledger_residual[-1])))
    orders = np.log2(np.array(res[:-1]) / res[1:])
    assert np.all(orders > order - 0.25) and np.all(orders < order + 0.6), orders


def test_stochastic_ledger_telescopes():
    """OU weights (one density per path): weight part = drift + martingale + Itô (realised)
    and E − E0 = weight work + token work, to round-off; the paths differ."""
    r = simulate(density_cfg())
    assert np.max(np.abs(r.ledger_telescoping)) <= 1e-13
    assert not np.allclose(r.rho[-1, 0], r.rho[-1, 1])
    total = r.weight_work[-1]
    parts = r.drift_work[-1] + r.martingale[-1] + r.ito_realised[-1]
    assert np.allclose(total, parts, rtol=0, atol=1e-13)


# ------------------------------------------------------------------------- convergence in h
def test_convergence_in_h():
    """A smooth case (von Mises start, D = I, descent and ascent, SSP-RK3 at Courant 0.2):
    van Leer converges at order ≈ 2 in L¹ and L∞; minmod clips the smooth extrema, its L∞
    order stays below van Leer's (measured: experiments/density.md)."""
    Ns = [32, 64, 128, 256]
    for sign in ("descent", "ascent"):
        o1, oi = observed_orders(Ns, "van_leer", sign)
        assert np.all(o1 > 1.85) and np.all(oi > 1.85), (sign, o1, oi)
        _, oi_mm = observed_orders(Ns, "minmod", sign)
        assert np.all(oi_mm < 1.97) and np.all(oi_mm > 1.3), (sign, oi_mm)


# ------------------------------------------------------------------------- engine switch
def test_options_and_layout(tmp_path):
    """Every model option that makes sense for a density runs (heads, the three normalisations,
    both signs, Laplacian heads, the weight processes); the HDF5 file holds ``rho``
    (records, P, N) instead of ``X`` and the series of a particle run."""
    from wflow.engine.driver import run_to_file
    from wflow.storage import io

    for over in ({"model__normalization": "joint", "model__sign": "ascent"},
                 {"model__normalization": "none", "model__laplacian_heads": 1},
                 {"weights__process": "oscillating", "weights__noise_var": 0.0,
                  "solver__paths": 1},
                 {"init__tokens": "uniform", "solver__method": "heun"}):
        cfg = density_cfg(**over, solver__T=0.1)
        if cfg["init"]["tokens"] == "uniform":
            del cfg["init"]["kappa"]
        r = simulate(cfg)
        assert np.all(np.isfinite(r.energy)) and np.all(np.isfinite(r.ledger_residual))
    path = tmp_path / "d.h5"
    run_to_file(density_cfg(solver__T=0.1), path)
    cfg, arrays, attrs = io.read(path)
    assert "X" not in arrays and arrays["rho"].shape == (2, 2, 64)
    for name in ("energy", "dissipation", "G2", "G2_hm", "b_hat_mean", "ledger_residual",
                 "weight_work", "mass", "rho_min"):
        assert arrays[name].shape[:2] == (2, 2), name


@pytest.mark.parametrize("key,value,field", [
    ("model__d", 4, "model.d"), ("solver__method", "rk4", "solver.method"),
    ("init__tokens", "octahedral", "init.tokens"), ("model__mask", "causal", "model.mask"),
])
def test_bad_density_config(key, value, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        simulate(density_cfg(**{key: value}))


def test_density_figure(tmp_path):
    """The ``density`` kind draws ρ(θ, t) and ρ on the circle (PNG of the fixed size, not one
    colour); a particle run has no ``rho`` and gets a PlotInputError naming the kind."""
    from PIL import Image

    from wflow.figures import plotting

    r = simulate(density_cfg(solver__T=0.2))
    (png,) = plotting.plot(r, kind="density", outdir=tmp_path, formats=("png",))
    with Image.open(png) as im:
        w, h = plotting.FIGSIZE["density"]
        assert im.size == (round(w * plotting.DPI), round(h * plotting.DPI))
        assert any(lo < hi for lo, hi in im.convert("RGB").getextrema())
    assert png.stat().st_size < 300_000
    with pytest.raises(plotting.PlotInputError, match="density"):
        plotting.plot((r.config, {k: v for k, v in r.arrays.items() if k != "rho"}),
                      kind="density", outdir=tmp_path)


def test_resume_is_bit_identical(tmp_path, monkeypatch):
    """A density run that dies while writing a checkpoint resumes from it (the state is ρ
    (P, N)) and gives records bit-identical to an uninterrupted run."""
    import h5py

    from wflow.engine import driver

    cfg = density_cfg(solver__T=0.3, solver__record_every=3, output__checkpoint_every=4)
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, cfg, tmp_path / "r.h5", 3)
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("rho", "series/energy", "series/ledger_residual", "series/mass"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


def test_step_restarts_with_more_substeps():
    """A step told a far too long stable step (max_dt = ∞, dt = 20 CFL steps) goes negative,
    restarts from ρ_k with twice as many substeps until it does not, and keeps mass and
    ρ ≥ 0; with MAX_RETRIES = 0 the NumericalError stands."""
    from wflow.stepping import density as sd

    g = fv.CircleGrid(64)
    dm = DensityModel(AttentionModel(beta=1.0, sign="ascent"), g)
    D = 3.0 * np.eye(2)[None, None]
    rho = vm_cells(g, 30.0)
    F = dm.evaluate(rho, D)
    dt = 20 * float(F.max_dt[0])
    ctx = StepContext(X=rho, dt=dt, sigma=dm.sigma, k1=F.rate, max_dt=np.array([np.inf]),
                      velocity=lambda r: dm.rate(r, D))
    rho1, info = DensityStepper("ssprk3").step(ctx)
    assert info["cfl_substeps"][0] >= 2 and np.all(rho1 >= 0)
    assert abs(rho1.sum() * g.h - 1.0) <= 64 * U
    old = sd.MAX_RETRIES
    try:
        sd.MAX_RETRIES = 0
        with pytest.raises(NumericalError, match="negative cell average"):
            DensityStepper("ssprk3").step(ctx)
    finally:
        sd.MAX_RETRIES = old


def test_b_hat_extremes_are_over_the_support_of_a_density():
    """b̂ is a field defined at every cell centre, but min/max over the tokens correspond to
    min/max over the cells that carry mass: an empty cell (ρ_k = 0) does not count."""
    from types import SimpleNamespace

    from wflow.engine.series import SERIES

    b = np.array([[0.1, 0.5, 0.9, 2.0], [3.0, 0.2, 0.4, 0.3]])
    m = np.array([[0.0, 0.5, 0.5, 0.0], [0.2, 0.0, 0.3, 0.5]])
    dens = SimpleNamespace(field=SimpleNamespace(b_hat=b, masses=m))
    np.testing.assert_array_equal(SERIES["b_hat_min"].fn(dens), [0.5, 0.3])
    np.testing.assert_array_equal(SERIES["b_hat_max"].fn(dens), [0.9, 3.0])
    toks = SimpleNamespace(field=SimpleNamespace(b_hat=b))  # particles: every token
    np.testing.assert_array_equal(SERIES["b_hat_min"].fn(toks), [0.1, 0.2])
    np.testing.assert_array_equal(SERIES["b_hat_max"].fn(toks), [2.0, 3.0])
