"""simulate: shapes of [model §0, §10], reproducibility, independence of path batching, failures."""

import numpy as np
import pytest
from conftest import small_config

import wflow
from wflow.engine.run import Simulation
from wflow.engine.series import names

SERIES_POINT = names(kind="point", group="core")
# every run's cumulative series but those of token noise (recorded only when model.diffusion
# > 0 on particles, [model §6b]; tests/test_noise.py) and of a diffusive density's free energy
SERIES_CUMULATIVE = tuple(k for k in names(kind="cumulative")
                          if k not in names(group="token_noise") + names(group="free_energy"))


def test_shapes_and_records():
    cfg = small_config()
    res = wflow.simulate(cfg)
    K = 20  # T / dt
    assert res.t.shape == (K // 5 + 1,)
    np.testing.assert_allclose(res.t, np.arange(0, K + 1, 5) * 0.01)
    assert res.t[0] == 0.0
    for k in SERIES_POINT + SERIES_CUMULATIVE:
        assert res[k].shape == (len(res.t), 2), k
    assert res.X.shape == (len(res.t), 2, 12, 3)
    np.testing.assert_allclose(np.linalg.norm(res.X, axis=-1), 1.0, atol=1e-14)
    # cumulative series start at 0
    for k in SERIES_CUMULATIVE:
        assert np.all(res[k][0] == 0.0), k


def test_same_config_same_bytes(backend):
    cfg = small_config(**{"solver.backend": backend, "solver.method": "heun"})
    a, b = wflow.simulate(cfg), wflow.simulate(cfg)
    assert sorted(a.keys()) == sorted(b.keys())
    for k in a.keys():
        assert np.array_equal(a[k], b[k], equal_nan=True), k


def test_seed_changes_everything():
    a = wflow.simulate(small_config())
    b = wflow.simulate(small_config(**{"init.seed": 8}))
    assert not np.array_equal(a.X[0], b.X[0])


def test_paths_share_initial_state_but_not_noise():
    res = wflow.simulate(small_config(**{"output.store_weights": True}))
    assert np.array_equal(res.X[0, 0], res.X[0, 1])
    assert np.array_equal(res.D[0, 0], res.D[0, 1])
    assert not np.array_equal(res.D[-1, 0], res.D[-1, 1])


def test_paths_do_not_depend_on_batch_size():
    """Path p draws only from its own stream: the first two paths of a 3-path run equal a 2-path run."""
    a = wflow.simulate(small_config(**{"solver.paths": 2}))
    b = wflow.simulate(small_config(**{"solver.paths": 3}))
    for k in ("X", "energy", "G2", "ledger_residual"):
        np.testing.assert_array_equal(a[k], b[k][:, :2])


def test_backends_agree_on_a_run():
    a = wflow.simulate(small_config(**{"solver.backend": "numpy"}))
    b = wflow.simulate(small_config(**{"solver.backend": "numba"}))
    for k in ("X", "energy", "G2", "G2_hm", "dissipation", "paper_residual"):
        np.testing.assert_allclose(b[k], a[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_oscillating_deterministic_paths_identical():
    res = wflow.simulate(small_config(**{"weights.process": "oscillating",
                                         "weights.noise_var": 0.0}))
    np.testing.assert_array_equal(res.X[:, 0], res.X[:, 1])
    assert np.all(res.martingale == 0) and np.all(res.paper_martingale == 0)


def test_non_finite_step_raises_numerical_error(monkeypatch):
    sim = Simulation(small_config())
    orig = sim.model.evaluate
    calls = {"n": 0}

    def bad(X, D, want_ito=True):
        calls["n"] += 1
        F = orig(X, D, want_ito)
        if calls["n"] > 6:
            F.velocity[:] = np.nan
        return F

    object.__setattr__(sim, "model", sim.model)
    monkeypatch.setattr(type(sim.model), "evaluate", lambda self, X, D, want_ito=True: bad(X, D, want_ito))
    with pytest.raises(wflow.NumericalError, match=r"step \d+"):
        sim.run()


def test_ledger_off_gives_nan_ledger_and_keeps_balance():
    res = wflow.simulate(small_config(**{"diagnostics.ledger": False}))
    assert np.all(np.isnan(res.ledger_residual)) and np.all(np.isnan(res.weight_work))
    assert np.all(np.isfinite(res.paper_residual)) and np.all(np.isfinite(res.int_G2))


def test_causal_run_energy_nan_velocity_defined():
    res = wflow.simulate(small_config(**{"model.mask": "causal"}))
    assert np.all(np.isnan(res.energy))
    assert np.all(np.isfinite(res.X))
    assert not np.array_equal(res.X[0], res.X[-1])


def test_float32_close_to_float64():
    """float32 pair loop: the ledger and the energy stay within 1e-6 of float64 (documented)."""
    a = wflow.simulate(small_config())
    b = wflow.simulate(small_config(**{"solver.precision": "float32"}))
    assert not np.array_equal(a.energy, b.energy)  # the option really changes the arithmetic
    for k in ("energy", "G2", "dissipation", "token_work", "weight_work", "ledger_residual"):
        assert np.max(np.abs(a[k] - b[k])) < 1e-6 * max(1.0, np.max(np.abs(a[k]))), k
    assert np.max(np.abs(b.ledger_telescoping)) < 1e-12


def test_same_bytes_with_one_thread(tmp_path):
    """[model §11]: identical arrays whatever the number of threads (fixed partition and order)."""
    import os
    import subprocess
    import sys

    cfg = small_config(**{"model.n": 70, "model.heads": 4})
    here = wflow.simulate(cfg)
    out = tmp_path / "one_thread.npz"
    code = ("import sys, numpy as np, wflow; sys.path.insert(0, %r)\n"
            "from conftest import small_config\n"
            "r = wflow.simulate(small_config(**{'model.n': 70, 'model.heads': 4}))\n"
            "np.savez(%r, X=r.X, energy=r.energy, G2=r.G2, res=r.ledger_residual)\n"
            % (os.path.dirname(__file__), str(out)))
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    with np.load(out) as z:
        for k, a in (("X", here.X), ("energy", here.energy), ("G2", here.G2),
                     ("res", here.ledger_residual)):
            np.testing.assert_array_equal(z[k], a, err_msg=k)


def test_weights_from_file_drive_the_run(tmp_path):
    """process = "file": the recorded D follow the file's trajectory (linear between knots)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3, 3, 3))
    traj = A + A.transpose(0, 1, 3, 2)  # (K = 3, H = 3, d, d)
    t = np.array([0.0, 0.1, 0.2])
    path = tmp_path / "w.npz"
    np.savez(path, D=traj, t=t)
    cfg = small_config(**{"weights.process": "file", "weights.file": str(path),
                          "output.store_weights": True, "solver.record_every": 5})
    res = wflow.simulate(cfg)
    np.testing.assert_allclose(res.t, [0.0, 0.05, 0.1, 0.15, 0.2])
    for r, want in ((0, traj[0]), (2, traj[1]), (4, traj[2]), (1, 0.5 * (traj[0] + traj[1]))):
        np.testing.assert_allclose(res.D[r, 0], want, rtol=0, atol=1e-12)
    # deterministic: no martingale, and the drift is the slope of the interpolant
    np.testing.assert_allclose(res.paper_martingale, 0.0, atol=1e-12)


def test_layers_switch_weights_on_step_boundaries():
    cfg = small_config(**{"weights.process": "layers", "output.store_weights": True,
                          "weights.layers": [{"duration": 0.1, "weights": "identity"},
                                             {"duration": 0.1, "weights": "symmetric_gaussian",
                                              "seed": 4}],
                          "solver.record_every": 5})
    res = wflow.simulate(cfg)
    I = np.broadcast_to(np.eye(3), (3, 3, 3))
    np.testing.assert_array_equal(res.D[0, 0], I)
    np.testing.assert_array_equal(res.D[1, 0], I)
    assert not np.allclose(res.D[3, 0], I)
    np.testing.assert_array_equal(res.D[3, 0], res.D[4, 1])


@pytest.mark.parametrize("ready", [False, True])
def test_a_run_says_when_it_compiles(monkeypatch, capsys, ready):
    """With a progress bar, a run whose kernels are not compiled for this CPU says so in one
    line before compiling (and starts its bar after it); one whose kernels are cached does
    not. The bits do not depend on it."""
    from wflow.engine.run import COMPILING
    from wflow.model.attention import AttentionModel

    monkeypatch.setattr(AttentionModel, "kernels_ready", lambda self, X, D: ready)
    res = wflow.simulate(small_config(), progress=True)
    err = capsys.readouterr().err
    assert (COMPILING in err) is (not ready)
    np.testing.assert_array_equal(res.X, wflow.simulate(small_config()).X)


_CACHED_MODULE = """
from numba import njit

@njit(cache=True)
def plus_one(x):
    return x + 1.0
"""

_CACHE_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import probe_mod
from wflow.kernels.fused import _compiled_for_this_cpu
before = _compiled_for_this_cpu(probe_mod.plus_one)
probe_mod.plus_one(1.0)
print(int(before), int(_compiled_for_this_cpu(probe_mod.plus_one)))
"""


def test_cold_cache_is_detected_from_numba_index(tmp_path):
    """The check behind the compile message reads numba's cache index: a function never
    compiled on this machine is not ready; compiled, it is; a new process finds it on disk."""
    import os
    import subprocess
    import sys

    (tmp_path / "probe_mod.py").write_text(_CACHED_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    run = lambda: subprocess.run([sys.executable, "-c", _CACHE_PROBE, str(tmp_path)], env=env,
                                 capture_output=True, text=True, check=True).stdout.split()
    assert run() == ["0", "1"]
    assert run() == ["1", "1"]
