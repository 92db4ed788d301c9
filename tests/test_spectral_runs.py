"""The spectral summation through runs [model §2s]: ``solver.summation`` declared by its
feature (wflow/model/spectral.py), a run within the tolerance's reach of the direct run,
its report recorded (``spectral_*`` series), resume bit-identical, ``auto`` by the crossover,
refusals in one line."""

import h5py
import numpy as np
import pytest
from test_io import crash_in_checkpoint

import wflow
from wflow import config as C
from wflow.cli import main
from wflow.engine import driver, memory
from wflow.engine import series as S
from wflow.kernels import spectral as sp
from wflow.model.spectral import AUTO_MIN_N, run_summation


def _cfg(**over):
    c = {"model": {"n": 300, "heads": 2, "d": 3}, "weights": {"process": "ou"},
         "solver": {"T": 0.05, "dt": 0.01, "paths": 2, "record_every": 1},
         "diagnostics": {"clustering": False}, "output": {"store_weights": True}}
    for key, val in over.items():
        sec, k = key.split("__")
        c.setdefault(sec, {})[k] = val
    return c


SPECTRAL = S.names(group="spectral")


def test_a_spectral_run_records_the_report_of_the_field_at_each_record():
    """At every record the ``spectral`` series are the report of the field's evaluation at the
    record's state (X_k; D_k): equal to the bit to ``wflow.field(..., report=True)`` there (a
    tolerance of 3·10⁻¹² at β = 1.5: the round-off term of the indicator flags some targets,
    so the fraction is not trivially 0); a direct run records none of them."""
    c = _cfg(model__beta=1.5, init__tokens="uniform", solver__summation="spectral",
             solver__summation_tol=3e-12, solver__max_flagged=1.0, solver__T=0.02)
    res = wflow.simulate(c)
    assert SPECTRAL == ("spectral_flagged", "spectral_degree", "spectral_indicator")
    for k in range(len(res.t)):
        for p in range(2):
            F, rep = wflow.field(res.X[k, p], res.D[k, p], beta=1.5, summation="spectral",
                                 tol=3e-12, max_flagged=1.0, report=True)
            assert res.spectral_flagged[k, p] == rep.flagged[0]
            assert res.spectral_degree[k, p] == rep.degree[0]
            assert res.spectral_indicator[k, p] == rep.indicator[0]
            assert res.energy[k, p] == F.energy
    assert np.max(res.spectral_flagged) > 0
    assert np.all(res.spectral_indicator <= C.validate(c)["solver"]["summation_tol"])
    direct = wflow.simulate(_cfg(model__beta=1.5, solver__T=0.02))
    assert not set(SPECTRAL) & set(direct.keys())


def test_the_memory_estimate_takes_the_degree_of_the_first_record():
    """The estimate's L (:func:`wflow.engine.memory.spectral_degree`, from the configuration's
    D(0) without its tokens) is the degree the run takes at t = 0 (the tail rule depends on
    β, D, n and the tolerance only)."""
    for over in ({}, {"model__beta": 3.0, "init__per_path_weights": True, "model__d": 2}):
        c = C.validate(_cfg(solver__summation="spectral", solver__T=0.01, **over))
        res = wflow.simulate(c)
        assert memory.spectral_degree(c) == np.max(res.spectral_degree[0])


def test_a_flagged_fraction_over_the_limit_stops_the_run_naming_the_step(capsys, tmp_path,
                                                                        monkeypatch):
    """Over ``solver.max_flagged`` the run stops with one line naming the step (here the
    exact ledger's evaluation at X_1 in step 0) and its time, exit 1."""
    monkeypatch.chdir(tmp_path)
    sets = ["model.n=300", "model.heads=2", "model.beta=8.0", "init.weights='goe'",
            "init.tokens='uniform'", "solver.T=0.03", "solver.dt=0.01",
            "solver.summation='spectral'", "solver.summation_tol=1e-13", "solver.max_flagged=0.05"]
    assert main(["run", "-q", "-o", "f.h5", *[a for s in sets for a in ("--set", s)]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in step 0 (t = 0 to 0.01): summation = 'spectral': " in err[0]
    assert "exceed the tolerance 1e-13 (limit 5%" in err[0]


def _agreement_cfg(n, summation):
    return {"model": {"n": n, "heads": 10, "d": 3}, "weights": {"process": "ou"},
            "init": {"tokens": "uniform"},
            "solver": {"method": "rk4", "T": 0.02, "dt": 0.01, "paths": 1, "record_every": 1,
                       "summation": summation},
            "diagnostics": {"ledger": True, "clustering": True},
            "output": {"store_weights": True}}


@pytest.mark.parametrize("n", [2000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_every_series_of_a_spectral_run_within_the_tolerance_of_the_direct_run(n):
    r"""The same run (S², H = 10, OU weights, RK4, the exact ledger, clustering) direct and
    spectral: every recorded series within :math:`10\,\varepsilon\,\bar s` of the direct
    one, ε = ``solver.summation_tol``.

    The bound: every evaluation gives :math:`Z_h(x_i)` to relative ε and the attention
    average to ε at every target [model §2s]. A value at a record is a mean over the targets
    of products of at most three factors linear in Z, the average and the exact X, D, V:
    within 3ε s̄ at the same state, s̄ the size of its terms. The tokens move with velocities
    within ‖V‖ε of each other, so after t = 0.02 they differ by at most t‖V‖ε e^{Λt} ≪ ε
    (Λ the field's Lipschitz constant, Λt ≪ 1), which moves the values by far less than ε s̄;
    the weights come from the same streams (equal). The cumulative series add dt × such
    errors over T/dt steps. Hence ≤ 10ε s̄ with room for the constants, where s̄ is the
    largest magnitude of the series in the run, and for the series in units of energy (the
    ledger's sums, its residuals and per-step pieces, differences of energies) the largest
    energy. The counts (n_clusters, spectral_rank, merged_fraction) are then equal.
    The ``spectral_*`` series: the fraction in [0, max_flagged], the indicator ≤ ε."""
    direct = wflow.simulate(_agreement_cfg(n, "direct"))
    spec = wflow.simulate(_agreement_cfg(n, "spectral"))
    cfg = C.validate(_agreement_cfg(n, "spectral"))
    eps, limit = cfg["solver"]["summation_tol"], cfg["solver"]["max_flagged"]
    assert set(spec.keys()) == set(direct.keys()) | set(SPECTRAL)
    e_max = np.max(np.abs(direct.energy))
    for name in direct.keys():
        a, b = np.asarray(direct[name], float), np.asarray(spec[name], float)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
        scale = np.nanmax(np.abs(a)) if np.any(np.isfinite(a)) else 0.0
        if name in S.SERIES and S.SERIES[name].units == "energy":
            scale = max(scale, e_max)
        np.testing.assert_allclose(b, a, rtol=0, atol=10 * eps * scale, err_msg=name)
    np.testing.assert_array_equal(spec.D, direct.D)
    assert spec.spectral_flagged.shape == (len(spec.t), 1)
    assert np.all((spec.spectral_flagged >= 0) & (spec.spectral_flagged <= limit))
    assert np.all(spec.spectral_indicator <= eps)
    assert np.all((spec.spectral_degree >= 2) & (spec.spectral_degree <= sp.L_MAX[3]))


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
        for name in ("X", "D", "series/energy", "series/G2", "series/ledger_residual",
                     *(f"series/{k}" for k in SPECTRAL)):
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
