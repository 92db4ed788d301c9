"""An imported model as a run [model §5c]: the `imported` weight process (layer ℓ on
[ℓ, ℓ+1), values, key logit weights and drift from the weight state), the run's velocity
against the attention sub-layer, the hidden-space Euler step against `transformers`, the
layer switches, the CLI run and the bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from test_checkpoint import _write_gpt2
from test_io import crash_in_checkpoint

from wflow.cli import main
from wflow.engine.run import Simulation, simulate
from wflow.errors import ConfigError
from wflow.model import checkpoint as ck
from wflow.model.attention import Factored, attention_update
from wflow.storage import io

# float64 round-off of a few matrix products of width <= 24 and a softmax, relative to the
# output's size (as tests/test_checkpoint.py)
TOL = 1e-12


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _gpt2_npz(tmp_path, d=8, H=2, L=3, seed=0, zero_bias=False):
    """A random GPT-2-named checkpoint (test_checkpoint's), imported to ``w{seed}.npz``."""
    root = tmp_path / f"ckpt{seed}"
    root.mkdir()
    folder, _ = _write_gpt2(root, d, H, L, seed, zero_bias=zero_bias)
    return ck.load(folder).save(tmp_path / f"w{seed}.npz")


def _tokens(tmp_path, n, d, seed=1):
    path = tmp_path / "tokens.npz"
    X = ck.tokens_from_hidden(np.random.default_rng(seed).normal(size=(n, d)))
    np.savez(path, X=X)
    return path, X


def _sets(npz, tokens, n=6, d=8, H=2, causal=True, **more):
    base = {"weights.process": "imported", "weights.imported": str(npz),
            "model.interaction": "general", "model.head_combine": "sum",
            "model.sign": "ascent", "model.mask": "causal" if causal else "none",
            "model.n": n, "model.d": d, "model.heads": H, "init.tokens": "file",
            "init.tokens_file": str(tokens), "solver.backend": "numpy", "solver.dt": 0.1,
            "solver.T": 3.0, "solver.record_every": 1,
            "solver.paths": 1, "solver.method": "euler"}
    base.update(more)
    return [f"{k}={v}" for k, v in base.items()]


def _flow_velocity(imp, ell, U):
    """P_u P₁ out(u): the sub-layer output at tokens u, projected as the flow projects."""
    out = ck.attention_update(imp, ell, U, tokens=True)
    out = out - out.mean(axis=1, keepdims=True)  # P₁
    return out - np.sum(out * U, axis=1, keepdims=True) * U  # P_u


def test_run_velocity_is_the_layer_update_and_layers_switch_on_integers(tmp_path):
    npz = _gpt2_npz(tmp_path)
    tok, U = _tokens(tmp_path, 6, 8)
    sim = Simulation(None, _sets(npz, tok, **{"output.store_weights": "true"}))
    imp = ck.read_imported(npz)
    assert sim.process.jump_times() == [1.0, 2.0]
    X = U[None]
    for t in (0.0, 0.5, 0.9, 1.0, 1.7, 2.0, 2.9, 3.5):
        ell = min(int(t), 2)
        D = sim.process.at(t)[None]
        assert _rel(D[0], imp.layers[ell].A.transpose(0, 2, 1) @ imp.layers[ell].B) < 1e-14
        v = sim.model.evaluate(X, D).velocity[0]
        assert _rel(v, _flow_velocity(imp, ell, U)) < TOL
    # the run: the weights of step k are layer floor(k dt), switching on the steps k = 10, 20
    res = sim.run()
    assert len(res.t) == 31
    assert [sim.process.layer_of(Dk[0]) for Dk in res.D] == [min(k // 10, 2) for k in range(31)]
    assert np.max(np.abs(res.X.sum(axis=-1))) < 1e-12  # tokens stay in 1^⊥
    assert np.max(np.abs(np.linalg.norm(res.X, axis=-1) - 1)) < 1e-12
    # one Euler step from t = 1.0 uses layer 1
    k1 = sim.model.evaluate(res.X[10], sim.process.at(1.0)[None]).velocity
    assert np.allclose(res.X[11] * np.linalg.norm(res.X[10] + 0.1 * k1, axis=-1)[..., None],
                       res.X[10] + 0.1 * k1, rtol=0, atol=1e-13)


def test_numba_backend_without_key_weights_matches_numpy(tmp_path):
    npz = _gpt2_npz(tmp_path, zero_bias=True, seed=3)
    imp = ck.read_imported(npz)
    assert all(np.all(lay.key_bias == 0) for lay in imp.layers)
    tok, U = _tokens(tmp_path, 6, 8)
    a = Simulation(None, _sets(npz, tok, **{"solver.backend": "numba"}))
    b = Simulation(None, _sets(npz, tok))
    for t in (0.0, 1.0, 2.5):
        D = a.process.at(t)[None]
        va, vb = a.model.evaluate(U[None], D).velocity, b.model.evaluate(U[None], D).velocity
        assert _rel(va, vb) < TOL


def test_bidirectional_model_records_the_quantities_of_v(tmp_path):
    """BERT-like (no mask): G² is that of the run's velocity (drift included)."""
    npz = _gpt2_npz(tmp_path, seed=4)
    data = dict(np.load(npz))
    data["causal"] = np.array(False)
    np.savez(tmp_path / "bi.npz", **data)
    tok, U = _tokens(tmp_path, 6, 8)
    sim = Simulation(None, _sets(tmp_path / "bi.npz", tok, causal=False))
    F = sim.model.evaluate(U[None], sim.process.at(0.0)[None])
    v2 = np.sum(F.velocity[0] ** 2, axis=1)
    assert np.isclose(F.G2[0], np.mean(v2 / np.mean(1 / F.partition[0], axis=0)), rtol=1e-14)
    assert np.isnan(F.energy[0])


def test_cli_run_records_clustering(tmp_path, capsys):
    npz = _gpt2_npz(tmp_path)
    tok, _ = _tokens(tmp_path, 6, 8)
    out = tmp_path / "run.h5"
    argv = ["run", "-q", "-o", str(out)]
    for s in _sets(npz, tok, **{"solver.record_every": 5}):
        argv += ["--set", s]
    assert main(argv) == 0, capsys.readouterr().err
    cfg, arrays, _ = io.read(out)
    assert cfg["weights"]["process"] == "imported"
    assert np.all(np.isfinite(arrays["n_clusters"])) and np.all(np.isfinite(arrays["min_cosine"]))
    ref = simulate(None, _sets(npz, tok, **{"solver.record_every": 5}))
    np.testing.assert_array_equal(arrays["X"], ref.X)


def test_adaptive_steps_see_the_layer_switches(tmp_path):
    """dopri5 with the layer switches as breakpoints agrees with fine fixed rk4 steps (whose
    switches fall on steps) to the tolerances asked for, across both switches (t = 1, 2)."""
    npz = _gpt2_npz(tmp_path)
    tok, _ = _tokens(tmp_path, 6, 8)
    base = _sets(npz, tok, **{"diagnostics.ledger": "false", "solver.T": 2.2})
    a = simulate(None, base + ["solver.adaptive=true", "solver.method=dopri5",
                               "solver.rtol=1e-9", "solver.atol=1e-11"])
    b = simulate(None, base + ["solver.method=rk4", "solver.dt=0.001",
                               "solver.record_every=100"])
    np.testing.assert_allclose(a.t, b.t, rtol=0, atol=1e-12)
    # local tolerance 1e-9; the records come from dopri5's dense output (order 4) between
    # accepted steps of up to ~0.1: measured up to 3e-8 (rk4 at dt = 1e-3: ~1e-12)
    assert np.max(np.abs(a.X - b.X)) < 1e-6


def test_resume_across_a_layer_switch_is_bit_identical(tmp_path, monkeypatch):
    """The values, key weights and drift follow the weight state: a run killed after its
    checkpoint at step 7 (layer 0) resumes across the switch at step 10 bit-identically."""
    from wflow.engine import driver

    npz = _gpt2_npz(tmp_path)
    tok, _ = _tokens(tmp_path, 6, 8)
    cfg = _sets(npz, tok, **{"solver.T": 2.0, "output.checkpoint_every": 7,
                             "output.store_weights": "true"})
    ref = driver.run_to_file(None, tmp_path / "ref.h5", overrides=cfg)
    # checkpoints k = 0, 7 complete; killed writing k = 14
    crash_in_checkpoint(monkeypatch, None, tmp_path / "r.h5", 3, overrides=cfg)
    got = driver.resume(tmp_path / "r.h5")
    assert got.action == "resumed" and got.from_step == 7
    _, a, _ = io.read(ref)
    _, b, _ = io.read(tmp_path / "r.h5")
    for name in ("X", "D", "min_cosine"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("change, expect", [
    ({"model.interaction": "symmetric"}, "is not symmetric; set model.interaction = 'general'"),
    ({"solver.representation": "density", "model.d": 3}, None),
    ({"model.head_combine": "mean"}, "model.head_combine = 'mean' with weights.process = "
                                     "'imported': allowed is 'sum'"),
    ({"model.mask": "none"}, "causal mask"),
    ({"solver.dt": 0.3}, "the step must divide 1"),
    ({"model.heads": 3}, "set model.heads = 2"),
])
def test_bad_runs_are_one_line_exit_2(tmp_path, capsys, change, expect):
    npz = _gpt2_npz(tmp_path)
    tok, _ = _tokens(tmp_path, 6, 8)
    out = tmp_path / "bad.h5"
    argv = ["run", "-q", "-o", str(out)]
    for s in _sets(npz, tok, **change):
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert expect is None or expect in err, err
    assert not out.exists()


def test_density_is_refused(tmp_path):
    npz = _gpt2_npz(tmp_path, d=3, H=1)
    with pytest.raises(ConfigError, match="density"):
        Simulation(None, _sets(npz, "unused.npz", d=3, H=1, **{
            "solver.representation": "density", "init.tokens": "uniform", "solver.dt": 0.01}))


def test_missing_arrays_and_tokens_off_the_layernorm_sphere(tmp_path, capsys):
    npz = _gpt2_npz(tmp_path)
    data = dict(np.load(npz))
    del data["layer1/V_in"]
    np.savez(tmp_path / "cut.npz", **data)
    tok, _ = _tokens(tmp_path, 6, 8)
    with pytest.raises(ConfigError, match=r"weights.imported = .*cut.npz.*'layer1/V_in'"):
        Simulation(None, _sets(tmp_path / "cut.npz", tok))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="cannot read it as the .npz"):
        Simulation(None, _sets(tmp_path / "junk.npz", tok))
    X = np.random.default_rng(2).normal(size=(6, 8))
    np.savez(tmp_path / "raw.npz", X=X / np.linalg.norm(X, axis=1, keepdims=True))
    with pytest.raises(ConfigError, match="tokens_from_hidden"):
        Simulation(None, _sets(npz, tmp_path / "raw.npz"))


def test_shared_layers_are_frozen_weights(tmp_path):
    """ALBERT-shaped: layer 0 on the embeddings (width E = 4 != d = 8) is left out, the shared
    layer is frozen weights (no switch)."""
    rng = np.random.default_rng(9)
    d, E, H, r = 8, 4, 2, 4

    def lay(e):
        return ck.ImportedLayer(rng.normal(size=(H, r, e)), rng.normal(size=(H, r, e)),
                                rng.normal(size=(H, r, e)), rng.normal(size=(H, d, r)),
                                rng.normal(size=(H, e)), rng.normal(size=d), 0.0)

    shared = lay(d)
    imp = ck.ImportedModel("albert", [lay(E), shared, shared], causal=False, placement="post",
                           heads=H, head_dim=r, shared=True)
    npz = imp.save(tmp_path / "albert.npz")
    tok, U = _tokens(tmp_path, 6, d)
    sim = Simulation(None, _sets(npz, tok, causal=False))
    assert sim.process.jump_times() == [] and len(sim.process.sets) == 1
    for t in (0.0, 1.5, 2.9):
        v = sim.model.evaluate(U[None], sim.process.at(t)[None]).velocity[0]
        assert _rel(v, _flow_velocity(ck.read_imported(npz), 1, U)) < TOL


# ---------------------------------------------------------------------- transformers
def test_euler_step_of_the_imported_flow_is_a_gpt2_layer(tmp_path):
    """With a tiny random GPT-2 of `transformers` (float64, random biases and gains): one Euler
    step with Δt = 1 of ẋ = out(LN(x)) in the hidden space, from `attention_update` with the
    run's factors (key logit weights and drift), is the block's x + attn(ln_1(x)); and the
    run's velocity at t ∈ [ℓ, ℓ+1) is layer ℓ's update projected onto the LayerNorm sphere."""
    torch = pytest.importorskip("torch")
    tr = pytest.importorskip("transformers")
    cfg = tr.GPT2Config(n_embd=24, n_head=3, n_layer=2, n_positions=16, vocab_size=40,
                        bos_token_id=0, eos_token_id=0, layer_norm_epsilon=1e-5)
    cfg._attn_implementation = "eager"
    model = tr.GPT2Model(cfg)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1.0 + 0.3 * noise if ".ln_" in name or name.startswith("ln_f")
                    else 0.3 * noise)
    model = model.double().eval()
    model.save_pretrained(tmp_path / "gpt2", safe_serialization=True)
    npz = ck.load(tmp_path / "gpt2").save(tmp_path / "gpt2.npz")
    imp = ck.read_imported(npz)
    got, hooks = {}, []
    for ell, blk in enumerate(model.h):
        hooks.append(blk.ln_1.register_forward_pre_hook(
            lambda m, a, ell=ell: got.__setitem__(("x", ell), a[0][0].numpy().copy())))
        hooks.append(blk.ln_2.register_forward_pre_hook(
            lambda m, a, ell=ell: got.__setitem__(("y", ell), a[0][0].numpy().copy())))
    ids = torch.randint(0, 40, (1, 9), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    n = ids.shape[1]
    tok = tmp_path / "tok.npz"
    np.savez(tok, X=ck.tokens_from_hidden(got[("x", 0)]))
    sim = Simulation(None, _sets(npz, tok, n=n, d=24, H=3, **{"solver.T": 2.0}))
    for ell in range(2):
        x, y_model = got[("x", ell)], got[("y", ell)]
        lay = imp.layers[ell]
        Y = ck.tokens_from_hidden(x, lay.eps)  # the model's own ε
        out = attention_update(Y, Factored(lay.A, lay.B, 1.0),
                               Factored.values(lay.V_out, lay.V_in),
                               key_bias=lay.key_bias @ Y.T, drift=lay.drift, causal=True)
        dt = 1.0
        assert _rel(x + dt * out, y_model) < TOL
        # the run's velocity at t in [ℓ, ℓ+1), at the tokens of the LayerNorm sphere (ρ = 1)
        U = ck.tokens_from_hidden(x)
        v = sim.model.evaluate(U[None], sim.process.at(ell + 0.5)[None]).velocity[0]
        assert _rel(v, _flow_velocity(imp, ell, U)) < TOL
