"""General interactions [model §1b]: non-symmetric D_h, factored D_h = A_hᵀB_h/κ and
V_h = W_O,h W_V,h, summed heads; the kernels against the NumPy twin and their determinism."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from bounds import assert_within, field_bounds
from test_io import crash_in_checkpoint

from wflow import kernels as K
from wflow.errors import ConfigError
from wflow.kernels.reference import ENERGY_OUTPUTS, field_reference
from wflow.model.attention import AttentionModel, Factored, attention_update, energy, field

DEFINED = ("velocity", "partition", "b_hat", "G2", "G2_hm")


def sphere(rng, shape):
    X = rng.normal(size=shape)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def case(seed, P, n, d, H, scale=1.0):
    """Tokens, non-symmetric D (entries N(0, scale²)), untied non-symmetric V."""
    rng = np.random.default_rng(seed)
    return (sphere(rng, (P, n, d)), scale * rng.normal(size=(P, H, d, d)),
            rng.normal(size=(P, H, d, d)))


def general_pass(X, D, V, norm, lap, causal=False, tied=False, **kw):
    return K.fused_pass(X, D, V, 1.0, norm, lap, causal, tied, interaction="general", **kw)


@pytest.mark.parametrize("n, d, H, routes", [(37, 2, 3, {"rows"}), (41, 3, 4, {"rows"}),
                                             (29, 8, 2, {"rows"}), (203, 8, 3, {"blas"}),
                                             (200, 40, 2, {"blas-combine"})])
def test_general_kernels_match_twin(n, d, H, routes):
    """Every defined output of the general pass within its conditioning bound of the twin
    (tests/bounds.py), every normalisation, a Laplacian head, tied and untied values, masked
    and not; the energy-based outputs NaN."""
    X, D, V = case(n + d, 2, n, d, H, scale=1.5 / np.sqrt(d))
    lap = np.zeros(H, dtype=bool)
    lap[-1] = True
    heads = np.flatnonzero(lap)
    assert K.plan(X, D.swapaxes(-1, -2).copy(), 1.0, single=False, fast_exp=True, U=None,
                  causal=False, threads=1).route.value in routes
    worst = 0.0
    for norm in ("head", "joint", "none"):
        for tied in (False, True):
            for causal in (False, True):
                out = general_pass(X, D, V, norm, lap, causal, tied)
                for p in range(2):
                    Vp = None if tied else V[p]
                    ref = field_reference(X[p], D[p], 1.0, norm, heads, causal, Vp,
                                          interaction="general")
                    full = ref if not causal else field_reference(
                        X[p], D[p], 1.0, norm, heads, False, Vp, interaction="general")
                    b = field_bounds(X[p], D[p], 1.0, norm, heads, Vp, causal, full,
                                     masked=ref if causal else None)
                    for name in (DEFINED if not causal else ("velocity", "partition")):
                        worst = max(worst, assert_within(name, getattr(out, name)[p],
                                                         ref[name], b[name]))
                    for name in ENERGY_OUTPUTS:
                        assert np.all(np.isnan(getattr(out, name)[p])), name
    assert worst < 1.0


def test_orientation_is_query_key():
    """s_ij = β⟨x_i, D_h x_j⟩ (query x_i, key x_j), checked against explicit loops."""
    X, D, V = case(1, 1, 9, 3, 1)
    out = general_pass(X, D, V, "head", np.zeros(1, bool))
    x, Dh, Vh = X[0], D[0, 0], V[0, 0]
    v = np.empty_like(x)
    for i in range(9):
        s = np.array([x[i] @ Dh @ x[j] for j in range(9)])
        pi = np.exp(s - s.max())
        pi /= pi.sum()
        a = sum(pi[j] * (Vh @ x[j]) for j in range(9))
        v[i] = a - (a @ x[i]) * x[i]
    np.testing.assert_allclose(out.velocity[0], v, rtol=0, atol=1e-14)


@pytest.mark.parametrize("d, n", [(3, 50), (8, 40), (8, 301), (32, 300)])
def test_general_bits_independent_of_threads_and_batches(d, n):
    """Bit-identical outputs with 1 and 2 threads and with the paths in one batch or two."""
    X, D, V = case(7, 4, n, d, 3)
    lap = np.array([False, True, False])
    old = numba.get_num_threads()
    nt2 = min(2, numba.config.NUMBA_NUM_THREADS)
    try:
        numba.set_num_threads(1)
        whole = [general_pass(X, D, V, code, lap, causal) for code in (0, 1)
                 for causal in (False, True)]
        numba.set_num_threads(nt2)
        again = [general_pass(X, D, V, code, lap, causal) for code in (0, 1)
                 for causal in (False, True)]
        halves = [[general_pass(X[s], D[s], V[s], code, lap, causal)
                   for s in (slice(0, 1), slice(1, 4))] for code in (0, 1)
                  for causal in (False, True)]
    finally:
        numba.set_num_threads(old)
    for w, a, (h0, h1) in zip(whole, again, halves):
        for name, x, y, z0, z1 in zip(K.FieldPass._fields, w, a, h0, h1):
            assert x.tobytes() == y.tobytes(), name
            assert x.tobytes() == np.concatenate([z0, z1]).tobytes(), name


@pytest.mark.parametrize("d, n", [(3, 60), (8, 250)])
def test_symmetric_D_through_the_general_form(d, n):
    """A symmetric D through the general form gives the symmetric form's velocity (the same
    route: the same bits) and the other Z- and v-based outputs."""
    X, A, V = case(3, 2, n, d, 3)
    D = A + A.swapaxes(-1, -2)
    lap = np.array([True, False, False])
    for tied in (False, True):
        sym = K.fused_pass(X, D, V, 1.0, 1, lap, False, tied)
        gen = general_pass(X, D, V, 1, lap, tied=tied)
        for name in DEFINED:
            np.testing.assert_array_equal(getattr(gen, name), getattr(sym, name), err_msg=name)


@pytest.mark.parametrize("n", [41, 200])
def test_row_pass_heads_by_symmetry(n):
    """d = 3 row pass: a symmetric head's row sums have the same bits whatever the other heads
    (the column loop of the row pass); a non-symmetric head (rows across the vector lanes)
    agrees with it to rounding; the partitions of every head within rounding of the twin."""
    X, A, V = case(11, 2, n, 3, 3, scale=0.8)
    S = A + A.swapaxes(-1, -2)
    D = A.copy()
    D[:, 0] = S[:, 0]  # head 0 symmetric, heads 1 and 2 not
    lap = np.zeros(3, dtype=bool)
    mixed = general_pass(X, D, V, 0, lap)
    sym = general_pass(X, S, V, 0, lap, route="rows")
    np.testing.assert_array_equal(mixed.partition[:, 0], sym.partition[:, 0])
    for p in range(2):
        ref = field_reference(X[p], D[p], 1.0, "head", np.flatnonzero(lap), False, V[p],
                              interaction="general")
        np.testing.assert_allclose(mixed.partition[p], ref["partition"], rtol=1e-13)
        np.testing.assert_allclose(mixed.velocity[p], ref["velocity"], rtol=0, atol=1e-13)


def test_factored_equals_dense():
    """Factored D = AᵀB/κ (rank r < d) and V = W_O W_V give the dense product's field, in the
    twin (projections), the kernels (dense product) and attention_update."""
    rng = np.random.default_rng(5)
    P, n, d, H, r = 2, 30, 8, 3, 2
    X = sphere(rng, (P, n, d))
    A, B = rng.normal(size=(2, P, H, r, d))
    WO, WV = rng.normal(size=(P, H, d, r)), rng.normal(size=(P, H, r, d))
    Df, Vf = Factored(A, B, np.sqrt(r)), Factored.values(WO, WV)
    Dd, Vd = Df.dense(), Vf.dense()
    np.testing.assert_allclose(Dd, A.swapaxes(-1, -2) @ B / np.sqrt(r), rtol=1e-15)
    np.testing.assert_allclose(Vd, WO @ WV, rtol=1e-14)
    assert np.linalg.matrix_rank(Dd[0, 0]) == r
    for backend in ("numpy", "numba"):
        m = AttentionModel(interaction="general", backend=backend, normalization="joint")
        Ff = m.evaluate(X, Df, values=Vf)
        Fd = m.evaluate(X, Dd, values=Vd)
        for name in DEFINED:
            np.testing.assert_allclose(getattr(Ff, name), getattr(Fd, name), rtol=1e-12,
                                       atol=1e-12, err_msg=(backend, name))
    u_f = attention_update(X[0], Factored(A[0], B[0], np.sqrt(r)), Factored.values(WO[0], WV[0]))
    u_d = attention_update(X[0], Dd[0], Vd[0])
    np.testing.assert_allclose(u_f, u_d, rtol=1e-12, atol=1e-12)


def test_attention_update():
    """u_i = c + Σ_h V_h Σ_j π_ij x_j with per-key biases (masses: b_j = log(n w_j)) and the
    causal mask, against the field: P_x u / H is the head-mean velocity."""
    rng = np.random.default_rng(8)
    n, d, H = 12, 4, 3
    X = sphere(rng, (n, d))
    D, V = rng.normal(size=(2, H, d, d))
    c = rng.normal(size=d)
    for causal in (False, True):
        u = attention_update(X, D, V, beta=1.3, drift=c, causal=causal) - c
        F = field(X, D, beta=1.3, values=V, interaction="general", backend="numpy",
                  mask="causal" if causal else "none")
        Pu = u - np.einsum("ia,ia->i", u, X)[:, None] * X
        np.testing.assert_allclose(Pu / H, F.velocity, rtol=1e-12, atol=1e-13)
    w = rng.uniform(0.1, 1.0, size=n)
    w /= w.sum()
    uw = attention_update(X, D, V, key_bias=np.log(n * w))
    Fw = AttentionModel(interaction="general", backend="numpy").evaluate(
        X[None], D[None], values=V, weights=w)
    Pu = uw - np.einsum("ia,ia->i", uw, X)[:, None] * X
    np.testing.assert_allclose(Pu / H, Fw.velocity[0], rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="key_bias has shape"):
        attention_update(X, D, V, key_bias=np.zeros(n + 1))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_head_sum_is_H_times_mean(backend):
    X, D, V = case(4, 2, 25, 3, 4)
    for interaction, D_ in (("general", D), ("symmetric", D + D.swapaxes(-1, -2))):
        for norm in ("head", "none"):
            kw = dict(interaction=interaction, backend=backend, normalization=norm,
                      values=V[0])
            mean = AttentionModel(**kw).evaluate(X, D_)
            tot = AttentionModel(head_combine="sum", **kw).evaluate(X, D_)
            np.testing.assert_allclose(tot.velocity, 4 * mean.velocity, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(tot.G2, 16 * mean.G2, rtol=1e-12)
            np.testing.assert_allclose(tot.partition, mean.partition, rtol=1e-13)
    with pytest.raises(ValueError, match="joint"):
        AttentionModel(head_combine="sum", normalization="joint")


def test_refusals():
    """Non-symmetric D without interaction = 'general', or an energy of it: clear errors."""
    X, D, _ = case(2, 1, 10, 3, 2)
    with pytest.raises(ConfigError, match="symmetric.*interaction='general'"):
        field(X[0], D[0])
    with pytest.raises(ConfigError, match="exist only for symmetric D_h"):
        energy(X[0], D[0])
    F = field(X[0], D[0], interaction="general")
    assert np.isnan(F.energy) and np.isnan(F.dissipation) and np.all(np.isnan(F.gradient))
    assert np.isfinite(F.G2) and np.all(np.isfinite(F.velocity))
    with pytest.raises(ValueError, match="Factored D needs interaction"):
        AttentionModel().evaluate(X, Factored(D[0], D[0]))
    with pytest.raises(ValueError, match="rank r"):
        Factored(np.zeros((1, 4, 3)), np.zeros((1, 4, 3)))
    with pytest.raises(ValueError, match="interaction"):
        K.fused_pass(X, D, None, 1.0, 0, np.zeros(2, bool), False, True, interaction="x")


@pytest.mark.parametrize("d", [2, 3])
def test_a_non_symmetric_D_is_refused_by_every_symmetric_evaluation(d):
    """Under ``interaction = 'symmetric'`` a non-symmetric D is refused by the model's batch
    evaluation (direct and spectral summation) and by both density representations, which
    would otherwise return the field of a different D without a word; the general form takes
    it."""
    from wflow.geometry.circle_fv import CircleGrid
    from wflow.geometry.harmonics import harmonics
    from wflow.geometry.sphere_mesh import voronoi_mesh
    from wflow.model.density import DensityModel
    from wflow.model.density_spectral import SpectralDensityModel

    X, D, _ = case(2, 1, 40, d, 2)
    assert np.max(np.abs(D - np.swapaxes(D, -1, -2))) > 0.1
    for summation in ("direct", "spectral"):
        with pytest.raises(ConfigError, match="symmetric.*interaction='general'"):
            AttentionModel(summation=summation).evaluate(X, D)
        AttentionModel(summation=summation, interaction="general").evaluate(X, D)
    for grid, sm in ((CircleGrid(16) if d == 2 else voronoi_mesh(40), DensityModel),
                     (harmonics(d, 6), SpectralDensityModel)):
        rho = np.full((1, grid.N), 1.0 / (2 * np.pi if d == 2 else 4 * np.pi))
        with pytest.raises(ConfigError, match="symmetric"):
            sm(AttentionModel(), grid).evaluate(rho, D)
        sm(AttentionModel(interaction="general"), grid).evaluate(rho, D)


# ------------------------------------------------------------------ configuration and runs

SMALL = {"model": {"n": 12, "heads": 2, "interaction": "general"},
         "init": {"weights": "gaussian"},
         "solver": {"T": 0.05, "dt": 0.01, "record_every": 5, "paths": 2},
         "diagnostics": {"w2": False}}


def _cfg(**over):
    import copy

    cfg = copy.deepcopy(SMALL)
    for key, val in over.items():
        sec, k = key.split("__")
        cfg.setdefault(sec, {})[k] = val
    return cfg


def test_config_refusals():
    from wflow import config

    ok = config.resolve(_cfg())
    assert ok["diagnostics"]["ledger"] is False  # left out: no ledger for general D
    assert config.resolve({})["diagnostics"]["ledger"] is True
    for over, match in [
        ({"diagnostics__ledger": True}, "diagnostics.ledger = true with model.interaction = "
                                        "'general': the energy E"),
        ({"solver__method": "jko"}, "solver.method = 'jko' with model.interaction"),
        ({"weights__process": "oscillating", "weights__noise_var": 0.0},
         "weights.process = 'oscillating'.*keeps D_h symmetric"),
        ({"model__interaction": "symmetric"}, "init.weights = 'gaussian'.*needs "
                                              "model.interaction = 'general'"),
        ({"model__head_combine": "sum", "model__normalization": "joint"}, "weighted mean"),
    ]:
        with pytest.raises(ConfigError, match=match):
            config.resolve(_cfg(**over))


def test_initial_weights_families():
    from wflow.model.weights import GPT2_STD, initial_weights

    rng = np.random.default_rng(0)
    G = initial_weights("gaussian", 200, 8, rng)
    assert not np.allclose(G, G.swapaxes(-1, -2))
    assert abs(G.std() * np.sqrt(8) - 1) < 0.02
    O = initial_weights("goe", 200, 8, rng)
    np.testing.assert_array_equal(O, O.swapaxes(-1, -2))
    off = O[:, ~np.eye(8, dtype=bool)]
    assert abs(off.var() * 8 - 1) < 0.05 and abs(np.diagonal(O, 0, 1, 2).var() * 8 - 2) < 0.2
    g = initial_weights("gpt2", 200, 8, rng)
    assert abs(g.std() / GPT2_STD - 1) < 0.02


def test_general_run_records_what_exists(tmp_path):
    """A general run (OU with unsymmetrised noise): D(t) not symmetric, the Z- and v-based
    series finite, the energy-based series NaN; summed heads; a general weight file."""
    import wflow

    res = wflow.simulate(_cfg(output__path=str(tmp_path / "g.h5"), output__store_weights=True,
                              model__head_combine="sum"))
    assert not np.allclose(res.D[-1], np.swapaxes(res.D[-1], -1, -2))
    for name in ("G2", "int_G2"):
        assert np.all(np.isfinite(res[name])), name
    for name in ("energy", "dissipation", "ledger_residual"):
        assert np.all(np.isnan(res[name])), name

    W = np.random.default_rng(1).normal(size=(2, 3, 3))
    np.savez(tmp_path / "w.npz", D=W)
    with pytest.raises(ConfigError, match="not symmetric.*interaction = 'general'"):
        wflow.simulate(_cfg(model__interaction="symmetric", init__weights="file",
                            init__weights_file=str(tmp_path / "w.npz"),
                            output__path=str(tmp_path / "s.h5")))
    res = wflow.simulate(_cfg(init__weights="file", init__weights_file=str(tmp_path / "w.npz"),
                              weights__process="frozen", output__path=str(tmp_path / "f.h5"),
                              output__store_weights=True))
    np.testing.assert_array_equal(res.D[-1, 0], W)


def test_ou_general_noise_and_layers():
    """OU under interaction = 'general': the noise is the unsymmetrised Ξ (variance g²Δt per
    entry, EM), the symmetric form unchanged; layers take non-symmetric sets."""
    from wflow.model.processes import make_process

    spec = {"process": "ou", "rate": 1.0, "mean": 1.0, "noise_var": 2.0}
    sym = make_process(spec, 2, 3, 0.01)
    gen = make_process(spec, 2, 3, 0.01, interaction="general")
    assert sym.symmetric and not gen.symmetric
    D = np.broadcast_to(np.eye(3), (1, 2, 3, 3)).copy()
    rs = [np.random.default_rng(3)]
    rg = [np.random.default_rng(3)]
    Ds, Dg = sym.step(D, 0.0, 0.01, rs), gen.step(D, 0.0, 0.01, rg)
    np.testing.assert_array_equal(Ds, Ds.swapaxes(-1, -2))
    xi = np.random.default_rng(3).standard_normal((2, 3, 3))
    np.testing.assert_allclose(Dg[0], D[0] + np.sqrt(2.0) * np.sqrt(0.01) * xi, rtol=0,
                               atol=1e-15)
    np.testing.assert_allclose(Ds[0], D[0] + np.sqrt(2.0) * np.sqrt(0.01)
                               * (xi + xi.swapaxes(-1, -2)) / 2, rtol=0, atol=1e-15)
    W = np.random.default_rng(4).normal(size=(2, 3, 3))
    lay = {"process": "layers", "layers": [{"duration": 0.02, "weights": W.tolist()}]}
    with pytest.raises(ConfigError, match="not symmetric"):
        make_process(lay, 2, 3, 0.01)
    np.testing.assert_array_equal(make_process(lay, 2, 3, 0.01, interaction="general").sets[0], W)
    with pytest.raises(ConfigError, match="keeps D_h symmetric"):
        make_process({"process": "oscillating"}, 2, 3, 0.01, interaction="general")


@pytest.mark.parametrize("vals", ["factored", "dense", "tied"])
def test_factored_pass_matches_twin(vals):
    """The numba backend's factored pass (rank r < d: r-dimensional projections) against the
    twin: every normalisation, a Laplacian head, masses, the causal mask; the bits do not
    depend on the path batch or the thread counts."""
    import threadpoolctl

    rng = np.random.default_rng(11)
    P, n, d, H, r = 3, 530, 12, 2, 4  # n > ROW_BLOCK: two row blocks
    X = sphere(rng, (P, n, d))
    Df = Factored(rng.normal(size=(P, H, r, d)), rng.normal(size=(P, H, r, d)), np.sqrt(r))
    V = {"factored": Factored.values(rng.normal(size=(H, d, r)), rng.normal(size=(H, r, d))),
         "dense": rng.normal(size=(H, d, d)), "tied": None}[vals]
    w = rng.uniform(0.2, 1.0, size=n)
    w /= w.sum()
    Dd = Df.dense()
    for norm, causal, weights in (("head", False, None), ("joint", False, None),
                                  ("none", False, None), ("joint", True, None), ("head", False, w)):
        kw = dict(interaction="general", normalization=norm, laplacian_heads=(1,),
                  causal=causal, values=V)
        got = AttentionModel(**kw).evaluate(X, Df, weights=weights)
        ref = AttentionModel(backend="numpy", **kw).evaluate(X, Df, weights=weights)
        names = ("velocity", "partition") if causal else DEFINED
        for p in range(P):  # within the conditioning bounds of tests/bounds.py
            rp = {k: v[p] for k, v in ref.__dict__.items()}
            full = rp if not causal else {k: v[p] for k, v in AttentionModel(
                backend="numpy", **dict(kw, causal=False)).evaluate(X, Df).__dict__.items()}
            Vp = None if V is None else V.dense() if isinstance(V, Factored) else V
            b = field_bounds(X[p], Dd[p], 1.0, norm, (1,), Vp, causal, full, weights=weights,
                             masked=rp if causal else None)
            for name in names:
                assert_within(name, getattr(got, name)[p], rp[name], b[name])
        assert np.all(np.isnan(got.energy)) and np.all(np.isnan(got.gradient))
    m = AttentionModel(interaction="general", laplacian_heads=(1,), values=V)
    whole = m.evaluate(X, Df)
    parts = [m.evaluate(X[s], Factored(Df.A[s], Df.B[s], Df.scale))
             for s in (slice(0, 1), slice(1, 3))]
    with threadpoolctl.threadpool_limits(2):
        again = m.evaluate(X, Df)
    for name in DEFINED:
        a = getattr(whole, name)
        assert a.tobytes() == np.concatenate([getattr(q, name) for q in parts]).tobytes()
        assert a.tobytes() == getattr(again, name).tobytes()


def test_general_benchmark_suite_quick():
    """The ``general`` benchmark suite (benchmarks/suites.py) runs and agrees with NumPy."""
    from benchmarks import suites

    rows = suites.general_suite(quick=True, torch=False, repeats=1)
    assert {r["suite"] for r in rows} == {"general"} and len(rows) == 4
    for r in rows[::2]:
        assert r["ratio"] > 0 and r["data"]["rel_diff_v"] < 1e-12, r


def test_general_benchmark_suite_times_torch():
    """With PyTorch installed the ``torch ÷ wflow`` rows carry a ratio (not skipped)."""
    pytest.importorskip("torch")
    from benchmarks import suites

    rows = suites.general_suite(quick=True, repeats=1, cases=((48, 2, 16, 1, 4),))
    torch_rows = [r for r in rows if r["what"] == "time: torch ÷ wflow"]
    assert len(torch_rows) == 1 and torch_rows[0]["status"] == "ok", torch_rows
    assert torch_rows[0]["ratio"] > 0 and torch_rows[0]["data"]["torch_s"] > 0


def test_general_resume_is_bit_identical(tmp_path, monkeypatch):
    """A general run (OU with unsymmetrised noise) that dies while writing a checkpoint
    resumes from it with records bit-identical to an uninterrupted run."""
    import h5py

    from wflow.engine import driver

    cfg = _cfg(solver__T=0.12, solver__record_every=3, output__checkpoint_every=4,
               output__store_weights=True)
    ref = driver.run_to_file(cfg, tmp_path / "ref.h5")
    crash_in_checkpoint(monkeypatch, cfg, tmp_path / "r.h5", 2)
    assert driver.resume(tmp_path / "r.h5").action == "resumed"
    with h5py.File(ref, "r") as a, h5py.File(tmp_path / "r.h5", "r") as b:
        for name in ("X", "D", "series/G2"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)
        D = a["D"][()]
        assert not np.allclose(D[-1], np.swapaxes(D[-1], -1, -2))
