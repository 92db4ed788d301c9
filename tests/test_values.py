"""Time-dependent values V(t) of the weight processes [model §1b, §5]: the layer's values of
``layers`` (a function of the step, not of D: equal D and different V are not confused),
the values of ``file`` interpolated as D, the velocity of a step against the NumPy twin,
resume bit-identical across a switch, and the bad inputs (one line, exit 2, nothing
written)."""

from __future__ import annotations

import numpy as np
import pytest
from test_io import crash_in_checkpoint

from wflow.cli import main
from wflow.engine import driver
from wflow.engine.run import Simulation, simulate
from wflow.errors import ConfigError
from wflow.geometry import sphere
from wflow.kernels.reference import field_reference
from wflow.model.processes.values import VALUES_SPAWN_KEY
from wflow.storage import io

# float64 round-off of the kernels against the dense twin (n <= 12, d = 3): measured ~1e-16
TOL = 1e-12
BASE = {"model.n": 10, "model.d": 3, "model.heads": 2, "solver.dt": 0.1, "solver.T": 1.0,
        "solver.paths": 2, "solver.method": "euler", "solver.record_every": 1,
        "init.per_path_tokens": "true", "output.store_weights": "true"}


def _sets(**more):
    return [f"{k}={v}" for k, v in {**BASE, **more}.items()]


def _layers(*tables):
    return "[" + ", ".join("{" + t + "}" for t in tables) + "]"


def _euler(X, D, V, beta, sigma, dt):
    """One Euler step on the sphere with the NumPy twin's velocity at (X; D, V)."""
    v = np.stack([field_reference(X[p], D[p], beta, V=V)["velocity"] for p in range(len(X))])
    return sphere.normalize(X + dt * sigma * v)


def _steps_match(res, sim, values_of):
    """Every step X_{k+1} = Euler(X_k; D_k, V(t_k)), V from ``values_of(k)``."""
    m = sim.model
    for k in range(len(res.t) - 1):
        V = values_of(k)
        want = _euler(res.X[k], res.D[k], V, m.beta, m.sigma, sim.dt)
        err = np.max(np.abs(res.X[k + 1] - want))
        assert err < TOL, (k, err)


def test_layers_with_equal_D_and_different_V_use_the_layer_values():
    """Three layers of D = I with V = I, −I, gaussian: the step k uses its layer's V."""
    lay = _layers('duration = 0.3, weights = "identity", values = "identity"',
                  'duration = 0.3, weights = "identity", values = "minus_identity"',
                  'duration = 0.4, weights = "identity", values = "gaussian", seed = 5')
    sim = Simulation(None, _sets(**{"weights.process": "layers", "weights.layers": lay}))
    res = sim.run()
    assert np.all(res.D == np.eye(3))  # one D for every layer
    G = np.random.default_rng(np.random.SeedSequence(5, spawn_key=VALUES_SPAWN_KEY))
    G = G.standard_normal((2, 3, 3)) / np.sqrt(3)
    Vs = [np.broadcast_to(np.eye(3), (2, 3, 3)), -np.broadcast_to(np.eye(3), (2, 3, 3)), G]
    _steps_match(res, sim, lambda k: Vs[min(k // 3, 2)])
    np.testing.assert_array_equal(sim.process.values_at(0.65), G)
    assert sim.process.describe()["values"] == ["identity", "minus_identity",
                                                "gaussian(seed=5)"]


def test_tied_is_the_default_and_drawn_values_leave_the_D_draws_alone():
    lay = ('duration = 0.5, weights = "symmetric_gaussian", seed = 3{}',
           'duration = 0.5, weights = "identity"{}')
    plain = simulate(None, _sets(**{"weights.process": "layers",
                                    "weights.layers": _layers(*(t.format("") for t in lay))}))
    tied = simulate(None, _sets(**{"weights.process": "layers", "weights.layers": _layers(
        *(t.format(', values = "tied"') for t in lay))}))
    for name in ("X", "D", "energy"):
        np.testing.assert_array_equal(plain.arrays[name], tied.arrays[name], err_msg=name)
    drawn = Simulation(None, _sets(**{"weights.process": "layers", "weights.layers": _layers(
        lay[0].format(', values = "symmetric_gaussian"'), lay[1].format(""))}))
    assert drawn.process.time_values
    np.testing.assert_array_equal(drawn.process.at(0.0), plain.D[0, 0])
    V = drawn.process.values_at(0.0)
    np.testing.assert_array_equal(V, np.swapaxes(V, -1, -2))
    assert drawn.process.values_at(0.5) is None  # the second layer is tied
    res = drawn.run()
    _steps_match(res, drawn, lambda k: V if k < 5 else None)


def test_layer_values_from_a_file(tmp_path):
    V = np.random.default_rng(0).normal(size=(2, 3, 3))
    np.savez(tmp_path / "v.npz", V=V)
    lay = _layers(f'duration = 1.0, weights = "identity", values = "{tmp_path / "v.npz"}"')
    sim = Simulation(None, _sets(**{"weights.process": "layers", "weights.layers": lay,
                                    "model.interaction": "general",
                                    "diagnostics.ledger": "false"}))
    np.testing.assert_array_equal(sim.process.values_at(0.3), V)
    res = sim.run()
    _steps_match(res, sim, lambda k: V)


def _trajectory(tmp_path, K=3, seed=0, with_t=True):
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(K, 2, 3, 3))
    D = (S + np.swapaxes(S, -1, -2)) / 2
    V = rng.normal(size=(K, 2, 3, 3))
    t = np.array([0.0, 0.4, 1.0])[:K]
    np.savez(tmp_path / "d.npz", D=D, t=t)
    np.savez(tmp_path / "v.npz", V=V, **({"t": t} if with_t else {}))
    return D, V, t


def test_file_values_are_interpolated_as_D(tmp_path):
    D, V, t = _trajectory(tmp_path)
    sim = Simulation(None, _sets(**{"weights.process": "file",
                                    "weights.file": str(tmp_path / "d.npz"),
                                    "weights.file_values": str(tmp_path / "v.npz")}))
    p = sim.process
    for s in (0.0, 0.1, 0.4, 0.7, 1.0, 1.5):
        i = min(int(np.searchsorted(t, s, side="right")) - 1, 1)
        w = min(max((s - t[i]) / (t[i + 1] - t[i]), 0.0), 1.0)
        np.testing.assert_array_equal(p.values_at(s), (1 - w) * V[i] + w * V[i + 1])
        np.testing.assert_array_equal(p.at(s), (1 - w) * D[i] + w * D[i + 1])
    np.testing.assert_array_equal(p.values_at(0.4), V[1])  # exact at the knots
    res = sim.run()
    _steps_match(res, sim, lambda k: p.values_at(k * sim.dt))
    # without the values: the tied run of before, bit for bit
    tied = simulate(None, _sets(**{"weights.process": "file",
                                   "weights.file": str(tmp_path / "d.npz")}))
    ref = Simulation(None, _sets(**{"weights.process": "file",
                                    "weights.file": str(tmp_path / "d.npz")}))
    assert not ref.process.time_values and ref.model_at(0.3) is ref.model
    np.testing.assert_array_equal(tied.X[0], res.X[0])
    assert np.max(np.abs(tied.X[-1] - res.X[-1])) > 1e-3  # and the values matter


@pytest.mark.parametrize("process", ["layers", "file"])
def test_resume_across_a_switch_is_bit_identical(tmp_path, monkeypatch, process):
    _trajectory(tmp_path)
    if process == "layers":
        more = {"weights.process": "layers", "weights.layers": _layers(
            'duration = 0.5, weights = "identity", values = "gaussian", seed = 1',
            'duration = 0.5, weights = "identity", values = "symmetric_gaussian", seed = 2')}
    else:
        more = {"weights.process": "file", "weights.file": str(tmp_path / "d.npz"),
                "weights.file_values": str(tmp_path / "v.npz")}
    cfg = _sets(**more, **{"output.checkpoint_every": 3})
    ref = driver.run_to_file(None, tmp_path / "ref.h5", overrides=cfg)
    crash_in_checkpoint(monkeypatch, None, tmp_path / "r.h5", 3, overrides=cfg)  # k = 0, 3
    got = driver.resume(tmp_path / "r.h5")
    assert got.action == "resumed" and got.from_step == 3
    _, a, _ = io.read(ref)
    _, b, _ = io.read(tmp_path / "r.h5")
    for name in ("X", "D", "energy", "G2"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_non_post_placement_takes_the_values():
    """Pre-LN: the layer with V = I = D is the tied run bit for bit; the layer with V = −I
    is not."""
    lay = ('duration = 0.5, weights = "identity", values = "identity"',
           'duration = 0.5, weights = "identity", values = "{}"')
    over = {"weights.process": "layers", "model.layernorm": "pre"}
    a = simulate(None, _sets(**over, **{"weights.layers": _layers(lay[0], lay[1].format(
        "minus_identity"))}))
    b = simulate(None, _sets(**over, **{"weights.layers": _layers(lay[0], lay[1].format(
        "tied"))}))
    np.testing.assert_array_equal(a.X[:6], b.X[:6])
    assert np.max(np.abs(a.X[-1] - b.X[-1])) > 1e-3


@pytest.mark.parametrize("change, expect", [
    ({"weights.layers": _layers('duration = 1.0, weights = "identity", values = "half"')},
     "weights.layers[0].values = 'half': allowed values are tied, identity, minus_identity, "
     "gaussian, symmetric_gaussian or a .npz/.h5/.hdf5 path"),
    ({"model.values": "identity"}, "weights.layers[0].values with model.values = 'identity'"),
    ({"solver.adaptive": "true", "solver.method": "dopri5"}, "solver.adaptive = true"),
    ({"solver.representation": "density", "density.cells": 20},
     "solver.representation = 'density'"),
    ({"weights.layers": _layers('duration = 1.0, weights = "identity", values = 3')},
     "weights.layers[0].values = 3: must be a string"),
    ({"weights.layers": _layers('duration = 1.0, weights = "identity", '
                                'values = "missing.npz"')}, "weights.layers[0].values"),
])
def test_bad_layer_values_are_one_line_exit_2(tmp_path, capsys, change, expect):
    more = {"weights.process": "layers", "weights.layers": _layers(
        'duration = 1.0, weights = "identity", values = "minus_identity"')}
    out = tmp_path / "bad.h5"
    argv = ["run", "-q", "-o", str(out)]
    for s in _sets(**{**more, **change}):
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert expect in err, err
    assert not out.exists()


def test_bad_file_values(tmp_path):
    D, V, t = _trajectory(tmp_path)
    base = {"weights.process": "file", "weights.file": str(tmp_path / "d.npz")}

    def build(path, **more):
        return Simulation(None, _sets(**base, **{"weights.file_values": str(path)}, **more))

    np.savez(tmp_path / "short.npz", V=V[:2])
    with pytest.raises(ConfigError, match="holds 2 sets, weights.file 3"):
        build(tmp_path / "short.npz")
    np.savez(tmp_path / "other_t.npz", V=V, t=t + 0.1)
    with pytest.raises(ConfigError, match="key 't' differs from the knots"):
        build(tmp_path / "other_t.npz")
    np.savez(tmp_path / "no_v.npz", D=D)
    with pytest.raises(ConfigError, match="key 'V' missing"):
        build(tmp_path / "no_v.npz")
    np.savez(tmp_path / "nan.npz", V=np.where(V > 1, np.nan, V))
    with pytest.raises(ConfigError, match="must be finite"):
        build(tmp_path / "nan.npz")
    with pytest.raises(ConfigError, match="needs weights.process = 'file'"):
        Simulation(None, _sets(**{"weights.file_values": str(tmp_path / "v.npz")}))
    with pytest.raises(ConfigError, match="model.values = 'tied'"):
        build(tmp_path / "v.npz", **{"model.values": "gaussian"})
