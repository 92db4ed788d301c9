"""Per-head key logit terms b_hj [model §1b, §5c] in the numba passes: the fused and the
factored pass against the NumPy twin (wflow.kernels.reference), bits independent of the
thread count and of the path batch, and an imported model with key weights on the numba
backend against the NumPy backend."""

from __future__ import annotations

import numpy as np
import pytest
from test_checkpoint import _write_gpt2

from wflow.engine.run import Simulation
from wflow.kernels import fused_pass, get_num_threads, set_num_threads
from wflow.kernels.factored import factored_pass
from wflow.kernels.reference import Factored, field_reference
from wflow.model import checkpoint as ck

# float64 round-off of a softmax over n <= 50 keys and a few products of width <= 8, relative
# to the output's size: the passes sum in another order than the twin (measured <= 1.1e-15)
TOL = 1e-12
OUTPUTS = ("velocity", "partition", "b_hat", "G2", "G2_hm")


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _imported(tmp_path, causal, d=8, H=2, L=3, n=6, seed=7):
    """A random GPT-2-named checkpoint with key biases, imported (with or without its causal
    mask), its tokens file and the overrides of a run of it (tests/test_checkpoint_flow.py)."""
    root = tmp_path / "ckpt"
    root.mkdir()
    folder, _ = _write_gpt2(root, d, H, L, seed)
    npz = ck.load(folder).save(tmp_path / "w.npz")
    if not causal:
        data = dict(np.load(npz))
        data["causal"] = np.array(False)
        npz = tmp_path / "bi.npz"
        np.savez(npz, **data)
    U = ck.tokens_from_hidden(np.random.default_rng(1).normal(size=(n, d)))
    np.savez(tmp_path / "tokens.npz", X=U)
    sets = {"weights.process": "imported", "weights.imported": str(npz),
            "model.interaction": "general", "model.head_combine": "sum",
            "model.sign": "ascent", "model.mask": "causal" if causal else "none",
            "model.n": n, "model.d": d, "model.heads": H, "init.tokens": "file",
            "init.tokens_file": str(tmp_path / "tokens.npz"), "solver.dt": 0.1,
            "solver.T": 2.0, "solver.record_every": 1, "solver.paths": 1,
            "solver.method": "euler", "diagnostics.ledger": "false"}
    return npz, U, sets


def _case(seed, P=3, n=29, H=3, d=5, r=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(P, n, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    return (X, rng.normal(size=(P, H, d, d)) / np.sqrt(d), rng.normal(size=(P, H, d, d)),
            rng.normal(size=(P, H, n)), rng.normal(size=(P, H, r, d)),
            rng.normal(size=(P, H, r, d)), rng.uniform(0.2, 1.0, size=(P, n)))


def _close(out, p, ref, causal):
    for k in OUTPUTS:
        if causal and k != "velocity" and k != "partition":
            assert np.all(np.isnan(getattr(out, k)[p])), k
            continue
        a, b = getattr(out, k)[p], np.asarray(ref[k])
        assert _rel(a, b) < TOL, (k, _rel(a, b))


@pytest.mark.parametrize("norm", ["head", "joint", "none"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_pass_with_key_bias_is_the_twin(norm, causal, weighted):
    X, D, V, kb, _, _, w = _case(1)
    lap = np.array([False, True, False])
    mass = w / w.sum(axis=1, keepdims=True) if weighted else None
    out = fused_pass(X, D, V, 1.3, norm, lap, causal, False, want_ito=False,
                     interaction="general", key_bias=kb, weights=mass)
    for p in range(X.shape[0]):
        ref = field_reference(X[p], D[p], 1.3, norm, [1], causal, V[p], interaction="general",
                              key_bias=kb[p], weights=None if mass is None else mass[p])
        _close(out, p, ref, causal)


@pytest.mark.parametrize("norm", ["head", "joint", "none"])
@pytest.mark.parametrize("causal", [False, True])
def test_factored_pass_with_key_bias_is_the_twin(norm, causal):
    X, _, V, kb, A, B, _ = _case(2)
    lap = np.array([False, False, True])
    for vals in (("dense", V), ("factored", A[:, :, ::-1], B, 1.5)):
        out = factored_pass(X, A, B, 1.7, vals, 0.9, norm, lap, causal, key_bias=kb)
        for p in range(X.shape[0]):
            Vp = V[p] if vals[0] == "dense" else Factored(vals[1][p], vals[2][p], 1.5)
            ref = field_reference(X[p], Factored(A[p], B[p], 1.7), 0.9, norm, [2], causal, Vp,
                                  interaction="general", key_bias=kb[p])
            _close(out, p, ref, causal)


def test_zero_key_bias_is_no_key_bias():
    """b = 0: the same field as without it (to rounding: the passes differ)."""
    X, D, V, kb, A, B, _ = _case(3)
    a = fused_pass(X, D, V, 1.0, "joint", np.zeros(3, bool), False, False, want_ito=False,
                   interaction="general", key_bias=np.zeros_like(kb))
    b = fused_pass(X, D, V, 1.0, "joint", np.zeros(3, bool), False, False, want_ito=False,
                   interaction="general")
    assert _rel(a.velocity, b.velocity) < TOL and _rel(a.partition, b.partition) < TOL
    c = factored_pass(X, A, B, 1.0, ("dense", V), 1.0, "joint", np.zeros(3, bool), False,
                      key_bias=np.zeros_like(kb))
    e = factored_pass(X, A, B, 1.0, ("dense", V), 1.0, "joint", np.zeros(3, bool), False)
    np.testing.assert_array_equal(c.velocity, e.velocity)  # adding 0.0 changes no bit


def test_a_shift_of_a_heads_key_bias_scales_its_partition_only():
    """b_hj + c_h: π unchanged, Z_h multiplied by e^{c_h} (so v with head normalisation is
    unchanged, with joint it is not)."""
    X, D, V, kb, _, _, _ = _case(4)
    c = np.array([0.3, -2.0, 40.0])  # a large shift: the masses stay <= w_j
    args = (X, D, V, 1.0, "head", np.zeros(3, bool), False, False)
    a = fused_pass(*args, want_ito=False, interaction="general", key_bias=kb)
    b = fused_pass(*args, want_ito=False, interaction="general", key_bias=kb + c[:, None])
    assert _rel(b.velocity, a.velocity) < TOL
    assert _rel(b.partition, a.partition * np.exp(c)[:, None]) < TOL


def test_bits_do_not_depend_on_threads_or_batch():
    X, D, V, kb, A, B, _ = _case(5, P=4, n=700)  # n > ROW_BLOCK: two blocks of rows
    lap = np.zeros(3, bool)
    t0 = get_num_threads()

    def both(sl):
        f = fused_pass(X[sl], D[sl], V[sl], 1.0, "joint", lap, False, False, want_ito=False,
                       interaction="general", key_bias=kb[sl])
        g = factored_pass(X[sl], A[sl], B[sl], 1.0, ("dense", V[sl]), 1.0, "joint", lap, False,
                          key_bias=kb[sl])
        return f, g

    try:
        set_num_threads(1)
        one = both(slice(None))
        set_num_threads(max(t0, 2))
        many = both(slice(None))
        parts = [both(slice(p, p + 1)) for p in range(4)]
    finally:
        set_num_threads(t0)
    for i in range(2):
        for k in OUTPUTS:
            a = getattr(one[i], k)
            np.testing.assert_array_equal(a, getattr(many[i], k), err_msg=k)
            np.testing.assert_array_equal(
                a, np.concatenate([getattr(q[i], k) for q in parts]), err_msg=k)


def test_key_bias_needs_the_general_interaction():
    X, D, V, kb, _, _, _ = _case(6)
    S = D + np.swapaxes(D, -1, -2)
    with pytest.raises(ValueError, match="key_bias needs interaction = 'general'"):
        fused_pass(X, S, V, 1.0, "head", np.zeros(3, bool), False, False, key_bias=kb)
    with pytest.raises(ValueError, match="key_bias has shape"):
        fused_pass(X, D, V, 1.0, "head", np.zeros(3, bool), False, False,
                   interaction="general", key_bias=kb[:, :, 1:])


@pytest.mark.parametrize("causal", [True, False])
def test_imported_model_with_key_weights_on_numba_is_the_numpy_backend(tmp_path, causal):
    npz, U, sets = _imported(tmp_path, causal)
    assert any(np.any(lay.key_bias != 0) for lay in ck.read_imported(npz).layers)

    def sim(backend):
        return Simulation(None, [f"{k}={v}" for k, v in {**sets,
                                                         "solver.backend": backend}.items()])

    a, b = sim("numba"), sim("numpy")
    for t in (0.0, 1.0, 1.5):
        D = a.process.at(t)[None]
        Fa, Fb = a.model.evaluate(U[None], D), b.model.evaluate(U[None], D)
        for k in ("velocity", "partition") + (() if causal else ("G2", "G2_hm", "b_hat")):
            assert _rel(getattr(Fa, k), getattr(Fb, k)) < TOL, k
    ra, rb = a.run(), b.run()
    # 20 Euler steps of a Lipschitz flow: the per-step rounding differences grow by at most
    # e^{L T}; measured <= 1e-15
    assert np.max(np.abs(ra.X - rb.X)) < 1e-10
