"""Layer-norm placements [model §1c]: the output before projection against the attention
sub-layer, one step of each placement against its block, the trajectory orders fitted from
several Δt, the unprojected post-LN step, the radius across a checkpoint, and bad input."""

import functools

import numpy as np
import pytest
from test_io import assert_same_records, crash_in_checkpoint, tiny

import wflow
from wflow import config as wconfig
from wflow.cli import main
from wflow.engine import driver
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.model import layernorm
from wflow.model.attention import AttentionModel, attention_update
from wflow.stepping.integrators import TABLEAUX
from wflow.stepping.layernorm import placement_step
from wflow.stepping.registry import StepContext, get_stepper


def _problem(n=7, d=3, H=2, seed=3, general=False):
    rng = np.random.default_rng(seed)
    X = sphere.normalize(rng.standard_normal((1, n, d)))
    D = rng.standard_normal((1, H, d, d)) / np.sqrt(d)
    if not general:
        D = 0.5 * (D + np.swapaxes(D, -1, -2))
    V = rng.standard_normal((H, d, d)) / np.sqrt(d)
    return X, D, V


def _u_direct(X, D, V, beta, normalization, lap, causal, head_combine):
    """u_i = Σ_h c_h o_h(x_i) token by token from the definition [model §1c] (one path)."""
    n, d = X.shape
    H = D.shape[0]
    u = np.zeros((n, d))
    for i in range(n):
        J = np.arange(i + 1) if causal else np.arange(n)
        o, Z = [], []
        for h in range(H):
            s = beta * np.array([X[i] @ D[h] @ X[j] for j in J])
            w = np.exp(s)
            a = (w[:, None] * (X[J] @ V[h].T)).sum(0) / w.sum()
            o.append(V[h] @ X[i] - a if h in lap else a)
            Z.append(w.sum() / n)
        o, Z = np.array(o), np.array(Z)
        c = {"head": np.full(H, 1 / H), "joint": Z / Z.sum(), "none": Z / H}[normalization]
        u[i] = (H if head_combine == "sum" else 1) * (c[:, None] * o).sum(0)
    return u


@pytest.mark.parametrize("normalization,lap,causal,combine,backend", [
    ("head", (), False, "mean", "numba"),
    ("joint", (1,), False, "mean", "numpy"),
    ("none", (0,), True, "sum", "numpy"),
    ("head", (), True, "sum", "numba"),
])
def test_output_from_velocity_and_radial_part(normalization, lap, causal, combine, backend):
    """v + ρx (v and ρ from one field evaluation) is the output u of the definition, for
    general D, untied values, Laplacian heads, the mask and summed heads; P_x u = v."""
    X, D, V = _problem(general=True)
    model = AttentionModel(beta=1.3, normalization=normalization, laplacian_heads=lap,
                           causal=causal, values=V, backend=backend, interaction="general",
                           head_combine=combine)
    u = layernorm.output(model, X, D)[0]
    ref = _u_direct(X[0], D[0], V, 1.3, normalization, lap, causal, combine)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(u, ref, rtol=0, atol=1e-12 * scale)


def test_output_is_the_attention_sublayer():
    """With heads summed and attention heads only, u is `attention_update` (the sub-layer
    output, heads added, no projection) to round-off."""
    X, D, V = _problem(n=9, H=3, general=True)
    model = AttentionModel(beta=0.7, values=V, backend="numpy", interaction="general",
                           head_combine="sum")
    u = layernorm.output(model, X, D)[0]
    ref = attention_update(X[0], D[0], V, beta=0.7)
    np.testing.assert_allclose(u, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


# ------------------------------------------------------------------ one step = the block
def _run(placement, method="euler", dt=0.5, T=1.0, **model):
    cfg = {"model": {"d": 3, "n": 8, "heads": 2, "beta": 1.0, "sign": "ascent",
                     "layernorm": placement, **model},
           "init": {"seed": 5}, "weights": {"process": "frozen"},
           "solver": {"method": method, "dt": dt, "T": T, "record_every": 1, "paths": 2,
                      "backend": "numpy"},
           "diagnostics": {"clustering": False},
           "output": {"store_tokens": True, "store_weights": True}}
    return wflow.simulate(cfg)


def _A(X, D):
    """The attention sub-layer A(x) = σu (ascent, heads averaged, tied values), per path."""
    return np.stack([attention_update(X[p], D[p], D[p]) / D.shape[1] for p in range(len(X))])


@pytest.mark.parametrize("placement", ["pre", "peri", "ngpt", "mix", "unprojected"])
def test_euler_steps_are_the_blocks(placement):
    """Two Euler steps of Δt = 1/2 equal the blocks of [model §1c] applied twice, with the
    attention output of `attention_update`: pre z + ΔtA(LN z), peri z + Δt LN(A(LN z)),
    nGPT LN(x + αΔt P_x LN(A x)), Mix-LN post then pre, and the unprojected post-LN step
    LN(x + ΔtA(x))."""
    dt, alpha = 0.5, 0.3
    if placement == "unprojected":
        r = _run("post", method="euler_unprojected")
    elif placement == "mix":
        r = _run("mix", mix_switch=0.5)
    else:
        r = _run(placement, ngpt_alpha=alpha) if placement == "ngpt" else _run(placement)
    D = r.D[0]
    x, rad = r.X[0], np.ones(r.X.shape[1:3])
    for k in range(2):
        A = _A(x, D)
        nA = np.linalg.norm(A, axis=-1, keepdims=True)
        if placement == "pre" or (placement == "mix" and k == 1):
            z = rad[..., None] * x + dt * A
        elif placement == "peri":
            z = rad[..., None] * x + dt * A / nA
        elif placement == "ngpt":
            z = x + dt * alpha * sphere.project(x, A) / nA
        elif placement == "mix":  # post-LN's projected Euler step before the switch
            z = x + dt * sphere.project(x, A)
        else:
            z = x + dt * A
        x = sphere.normalize(z)
        if placement in ("pre", "peri") or (placement == "mix" and k == 1):
            rad = np.linalg.norm(z, axis=-1)
        if placement in ("pre", "peri", "mix"):
            np.testing.assert_allclose(r.radius[k + 1], rad, rtol=1e-13, atol=0)
        np.testing.assert_allclose(r.X[k + 1], x, rtol=0, atol=1e-13)
    if placement == "mix":  # r = 1 until the switch, then it moves
        assert np.all(r.radius[1] == 1.0) and np.any(r.radius[2] != 1.0)
    assert ("radius" in r.keys()) == (placement in ("pre", "peri", "mix"))
    assert np.all(np.isnan(r.paper_residual)) == (placement != "unprojected")


# ------------------------------------------------------------------ orders in Δt
def _flow(placement, method, dt, T=1.0, seed=2):
    X, D, _ = _problem(n=6, H=2, seed=seed)
    model = AttentionModel(beta=1.0, sign="ascent", backend="numpy")

    def out(Y):
        return layernorm.output(model, Y, D)

    r = np.ones(X.shape[:2])
    for _ in range(int(round(T / dt))):
        if placement == "unprojected":
            ctx = StepContext(X=X, dt=dt, sigma=1.0, velocity=None, output=out)
            X, _ = get_stepper("euler_unprojected").step(ctx)
        else:
            X, r = placement_step(TABLEAUX[method], placement, X, r, dt, out, alpha=0.5)
    return np.concatenate([X.ravel(), r.ravel()])


@functools.lru_cache(maxsize=None)
def _reference(placement):
    """The flow at T = 1 by RK4 at Δt = 1/160 (computed once per placement)."""
    return _post_flow_rk4() if placement == "unprojected" else _flow(placement, "rk4", 1 / 160)


def _post_flow_rk4(dt=1 / 160, T=1.0):
    """The post-LN flow ẋ = σv by the retracted RK4 of [model §6] (radii 1), as `_flow`."""
    X, D, _ = _problem(n=6, H=2, seed=2)
    model = AttentionModel(beta=1.0, sign="ascent", backend="numpy")
    for _ in range(int(round(T / dt))):
        X, _ = get_stepper("rk4").step(StepContext(
            X=X, dt=dt, sigma=1.0, velocity=lambda Z: model.velocity(Z, D)))
    return np.concatenate([X.ravel(), np.ones(X.shape[1])])


@pytest.mark.parametrize("placement,method,order", [
    ("pre", "euler", 1), ("peri", "euler", 1), ("ngpt", "euler", 1), ("unprojected", None, 1),
    ("pre", "heun", 2), ("peri", "rk4", 4), ("ngpt", "heun", 2),
])
def test_trajectory_order(placement, method, order):
    """The error at T = 1 against RK4 at Δt = 1/160 falls as Δt^p: the slope fitted over
    Δt = 1/10, 1/20, 1/40 is the scheme's order p (±0.25); the unprojected post-LN step is the
    post-LN flow's, at order 1."""
    ref = _reference(placement)
    dts = np.array([1 / 10, 1 / 20, 1 / 40])
    err = [np.abs(_flow(placement, method, h) - ref).max() for h in dts]
    slope = np.polyfit(np.log(dts), np.log(err), 1)[0]
    assert abs(slope - order) < 0.25, (slope, err)


def test_order_figure(tmp_path):
    """The figure's fitted slope is the exponent of e = C Δt^p (exact data), and it writes
    one file per format."""
    from wflow.figures.layernorm import fitted_order, plot_placement_orders

    dts = np.array([0.1, 0.05, 0.025])
    assert abs(fitted_order(dts, 3.0 * dts**2) - 2.0) < 1e-12
    paths = plot_placement_orders({"pre-LN, heun": (dts, 3.0 * dts**2, 2),
                                   "pre-LN, euler": (dts, dts, 1)}, tmp_path)
    assert [p.name for p in paths] == ["placement_orders.png"] and paths[0].stat().st_size > 0


# ------------------------------------------------------------------ state across a checkpoint
def test_resume_across_checkpoint_keeps_the_radius(tmp_path, monkeypatch):
    """Killed while writing a checkpoint and resumed: every record, the radii included, is the
    uninterrupted run's to the bit (the radius is part of the checkpoint)."""
    cfg = tiny()
    cfg["model"]["layernorm"] = "pre"
    cfg["diagnostics"]["ledger"] = False
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    p = tmp_path / "r.h5"
    crash_in_checkpoint(monkeypatch, cfg, p, 4)
    assert driver.resume(p).action == "resumed"
    assert_same_records(p, ref)
    import h5py

    with h5py.File(ref, "r") as f:
        rad = f["series/radius"][()]
    assert rad.shape == (5, 2, 12) and np.all(rad[0] == 1.0) and np.all(rad[-1] != 1.0)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("over,key", [
    ({"model.layernorm": "layer"}, "model.layernorm"),
    ({"model.layernorm": "ngpt", "model.ngpt_alpha": 1.5}, "model.ngpt_alpha"),
    ({"model.layernorm": "ngpt", "model.ngpt_alpha": 0}, "model.ngpt_alpha"),
    ({"model.layernorm": "pre", "model.ngpt_alpha": 0.5}, "model.ngpt_alpha"),
    ({"model.layernorm": "mix", "model.mix_switch": -1}, "model.mix_switch"),
    ({"model.layernorm": "pre", "solver.representation": "density", "model.d": 2,
      "solver.method": "ssprk3", "init.tokens": "uniform"}, "solver.representation"),
    ({"model.layernorm": "peri", "solver.method": "jko"}, "solver.method"),
    ({"model.layernorm": "peri", "solver.method": "euler_unprojected"}, "solver.method"),
    ({"model.layernorm": "pre", "diagnostics.ledger": True}, "diagnostics.ledger"),
    ({"model.layernorm": "ngpt", "model.diffusion": 0.1}, "model.diffusion"),
    ({"model.layernorm": "pre", "solver.adaptive": True, "solver.method": "dopri5"},
     "solver.adaptive"),
])
def test_bad_placement_input(over, key):
    cfg = {"solver": {"T": 0.1, "dt": 0.01}}
    for k, v in over.items():
        sec, name = k.split(".")
        cfg.setdefault(sec, {})[name] = v
    with pytest.raises(ConfigError) as e:
        wconfig.resolve(cfg, explicit=None)
    msg = str(e.value)
    assert key in msg and len(msg.splitlines()) == 1, msg
    if key == "model.layernorm" and "layer" in str(over.values()):
        assert all(p in msg for p in layernorm.PLACEMENTS)


def test_bad_placement_cli_exit_2(tmp_path, capsys):
    rc = main(["run", "-o", str(tmp_path / "o.h5"), "-q", "--set", "model.layernorm='side'"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "model.layernorm" in err
    assert not (tmp_path / "o.h5").exists()


# ---------------------------------------------------------------- where the flow ends
def _one_point_run(place, sign, dt, T, switch=None):
    """n equal tokens, D = V = I frozen: u_i = x_i, so ρ_i = |u_i| = 1 and v_i = 0; the
    residual stream moves along x: r(t) = 1 + σt (pre, peri; mix-LN from its switch)."""
    from wflow.engine.run import Simulation

    cfg = {"model": {"n": 6, "heads": 2, "layernorm": place, "sign": sign},
           "weights": {"process": "frozen"}, "init": {"weights": "identity"},
           "solver": {"dt": dt, "T": T, "paths": 1, "record_every": 1},
           "diagnostics": {"clustering": False}}
    if switch is not None:
        cfg["model"]["mix_switch"] = switch
    X = np.tile(sphere.normalize(np.array([1.0, 2.0, 2.0])), (6, 1))
    return Simulation(cfg, tokens=X).run()


@pytest.mark.parametrize("place,switch", [("pre", None), ("peri", None), ("mix", 0.5)])
@pytest.mark.parametrize("dt", [0.01, 0.005, 0.0025])
def test_descent_stops_where_the_radius_reaches_zero(place, switch, dt):
    """Under descent r = 1 − (t − t_s) reaches 0 at t* = 1 + t_s [model §1c]: the run stops
    (NumericalError naming the radius, the step and the time) at t* − O(Δt), never later and
    never before the radius is O(Δt)."""
    t_star = 1.0 + (switch or 0.0)
    with pytest.raises(wflow.errors.NumericalError, match=r"radius r_i .* at step") as exc:
        _one_point_run(place, "descent", dt, 2.0 * t_star, switch)
    t_stop = exc.value.step * dt
    assert t_star - 3 * dt <= t_stop <= t_star + 1e-9


@pytest.mark.parametrize("place,switch", [("pre", None), ("peri", None), ("mix", 0.5)])
def test_ascent_radius_grows_as_the_closed_form(place, switch):
    """The same tokens under ascent: r(T) = 1 + T − t_s, to round-off (Euler is exact on a
    linear radius), and no stop."""
    T = 1.5
    res = _one_point_run(place, "ascent", 0.01, T, switch)
    np.testing.assert_allclose(res.radius[-1], 1.0 + T - (switch or 0.0), rtol=1e-12)


def test_default_run_under_pre_ln_descent_fails_in_one_line(tmp_path, capsys):
    """The reproducer of the reference run with pre-LN (descent, OU weights of mean I): exit 1,
    one line naming the radius; the file is marked failed at that step."""
    out = tmp_path / "pre.h5"
    rc = main(["run", "-q", "--set", "model.layernorm='pre'", "--set", "model.n=50", "-o",
               str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "radius r_i" in err[0] and "at step" in err[0], err
