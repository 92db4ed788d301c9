"""The spectral summation through runs [model §2s]: ``solver.summation`` declared by its
feature (wflow/model/spectral.py), a run within the tolerance's reach of the direct run,
resume bit-identical, ``auto`` by the crossover, refusals in one line."""

import h5py
import numpy as np
import pytest
from test_io import crash_in_checkpoint

import wflow
from wflow import config as C
from wflow.cli import main
from wflow.engine import driver
from wflow.model.spectral import AUTO_MIN_N, run_summation


def _cfg(**over):
    c = {"model": {"n": 300, "heads": 2, "d": 3}, "weights": {"process": "ou"},
         "solver": {"T": 0.05, "dt": 0.01, "paths": 2, "record_every": 1},
         "diagnostics": {"clustering": False}, "output": {"store_weights": True}}
    for key, val in over.items():
        sec, k = key.split("__")
        c.setdefault(sec, {})[k] = val
    return c


@pytest.mark.parametrize("d", [2, 3])
def test_a_spectral_run_follows_the_direct_run(d):
    """Five Euler steps with OU weights: the tokens and the energy of the spectral run stay
    within a few tolerances of the direct run's (the field's error is ≤ tol per evaluation and
    the flow is Lipschitz over this short time); the weights, drawn from the same streams,
    are equal to the bit."""
    direct = wflow.simulate(_cfg(model__d=d))
    spec = wflow.simulate(_cfg(model__d=d, solver__summation="spectral",
                               solver__summation_tol=1e-11))
    np.testing.assert_array_equal(spec.D, direct.D)
    np.testing.assert_allclose(spec.X, direct.X, rtol=0, atol=1e-9)
    np.testing.assert_allclose(spec.energy, direct.energy, rtol=1e-9)
    assert not np.array_equal(spec.X, direct.X)  # (the spectral route did run)


def test_resume_of_a_spectral_run_is_bit_identical(tmp_path, monkeypatch):
    c = _cfg(solver__summation="spectral", solver__T=0.08, output__checkpoint_every=3)
    ref = driver.run_to_file(c, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, c, tmp_path / "r.h5", 2)
    monkeypatch.undo()
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("X", "D", "series/energy", "series/G2", "series/ledger_residual"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


def test_auto_takes_the_spectral_route_above_the_crossover():
    small = C.validate(_cfg(solver__summation="auto"))
    assert run_summation(small) == "direct"
    big = C.validate(_cfg(solver__summation="auto", model__n=AUTO_MIN_N[3]))
    assert run_summation(big) == "spectral"
    four = C.validate(_cfg(solver__summation="auto", model__n=AUTO_MIN_N[3], model__d=4))
    assert run_summation(four) == "direct"  # where it does not apply
    # a small auto run is the direct run, to the bit
    a = wflow.simulate(_cfg(solver__summation="auto"))
    b = wflow.simulate(_cfg())
    np.testing.assert_array_equal(a.X, b.X)


@pytest.mark.parametrize("sets,match", [
    (["model.d=4"], "needs model.d = 2 or 3"),
    (["model.mask='causal'", "diagnostics.ledger=false"], "needs model.mask = 'none'"),
    (["solver.backend='numpy'"], "needs solver.backend = 'numba'"),
    (["model.layernorm='pre'", "diagnostics.ledger=false", "model.sign='ascent'"],
     "post-LN flow only"),
    (["weights.process='frozen'", "solver.adaptive=true", "solver.method='dopri5'",
      "solver.atol=1e-9"], "solver.summation_tol = 1e-10: must be <= 0.01 solver.atol = 1e-11"),
])
def test_refused_in_one_line_by_validate_and_run(sets, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a for s in ["model.n=8", "solver.T=0.02", "solver.dt=0.01",
                        "solver.summation='spectral'", *sets] for a in ("--set", s)]
    for cmd in (["validate"], ["run", "-q"]):
        assert main([*cmd, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and match in err[0], err


def test_the_time_estimate_of_a_spectral_run_grows_as_n():
    """`wflow validate` estimates a spectral run with its own terms (per point and head), so
    doubling n doubles the estimate where the direct pass's would quadruple."""
    from wflow.engine import timing

    def est(n, summation):
        c = C.validate(_cfg(model__n=n, solver__summation=summation, model__d=2,
                            output__store_tokens=False, diagnostics__ledger=False))
        return timing.estimate(c)[0], timing._route(c)

    (a, ra), (b, rb) = est(10**6, "spectral"), est(2 * 10**6, "spectral")
    assert ra == rb == "spectral" and 1.8 < b / a < 2.2
    (c, rc), (d, _) = est(10**4, "direct"), est(2 * 10**4, "direct")
    assert rc != "spectral" and d / c > 3.0
