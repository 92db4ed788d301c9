"""Trained weights in [model §5c]: the checkpoint reader and the mapping, cross-checked against
the `transformers` library (tiny models with random weights, biases and LayerNorm gains, in
float64; nothing downloaded), and the bad inputs of `wflow import-weights`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wflow.cli import main
from wflow.errors import ConfigError
from wflow.model import checkpoint as ck

# float64 round-off of a few matrix products of width <= 32 and a softmax, relative to the
# output's size: the two evaluations differ only in the order of the sums
TOL = 1e-12


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# ---------------------------------------------------------------------- torch models
@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return torch, transformers


def _randomise(torch, model, seed):
    """Every parameter (weights, biases, LayerNorm gains and biases) N(0, 0.3²) from an
    explicitly seeded torch generator; gains around 1 so that no gain is near zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.endswith("LayerNorm.weight") or ".ln_" in name or "layer_norm.weight" in name:
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.3 * noise)
    return model.double().eval()


def _build(hf, kind, tmp_path, seed=0, eps=None, **extra):
    torch, tr = hf
    if kind == "gpt2":
        cfg = tr.GPT2Config(n_embd=24, n_head=3, n_layer=2, n_positions=16, vocab_size=40,
                            bos_token_id=0, eos_token_id=0,
                            layer_norm_epsilon=1e-5 if eps is None else eps, **extra)
        model = tr.GPT2Model(cfg)
    elif kind == "bert":
        cfg = tr.BertConfig(hidden_size=24, num_attention_heads=4, num_hidden_layers=2,
                            intermediate_size=32, vocab_size=40, max_position_embeddings=16,
                            layer_norm_eps=1e-12 if eps is None else eps)
        model = tr.BertModel(cfg, add_pooling_layer=False)
    elif kind == "roberta":
        cfg = tr.RobertaConfig(hidden_size=24, num_attention_heads=4, num_hidden_layers=2,
                               intermediate_size=32, vocab_size=40, max_position_embeddings=18,
                               pad_token_id=1, layer_norm_eps=1e-5 if eps is None else eps)
        model = tr.RobertaModel(cfg, add_pooling_layer=False)
    elif kind == "distilbert":
        cfg = tr.DistilBertConfig(dim=24, n_heads=4, n_layers=2, hidden_dim=32, vocab_size=40,
                                  max_position_embeddings=16)
        model = tr.DistilBertModel(cfg)
    elif kind == "bart":
        cfg = tr.BartConfig(d_model=24, encoder_attention_heads=4, decoder_attention_heads=4,
                            encoder_layers=2, decoder_layers=1, encoder_ffn_dim=32,
                            decoder_ffn_dim=32, vocab_size=40, max_position_embeddings=16,
                            **extra)
        model = tr.BartModel(cfg)
    elif kind == "opt":
        cfg = tr.OPTConfig(hidden_size=24, num_attention_heads=4, num_hidden_layers=2,
                           ffn_dim=32, vocab_size=40, max_position_embeddings=16,
                           word_embed_proj_dim=24, **extra)
        model = tr.OPTModel(cfg)
    else:
        cfg = tr.AlbertConfig(hidden_size=24, num_attention_heads=2, num_hidden_layers=3,
                              embedding_size=12, intermediate_size=32, vocab_size=40,
                              max_position_embeddings=16)
        model = tr.AlbertModel(cfg, add_pooling_layer=False)
    # OPT's eager attention takes its softmax in float32; PyTorch's fused attention keeps
    # float64
    cfg._attn_implementation = "sdpa" if kind == "opt" else "eager"
    model = _randomise(torch, model, seed)
    out = tmp_path / kind
    model.save_pretrained(out, safe_serialization=True)
    return model, out


def _capture(hf, model, pairs, ids):
    """Run the model; for each (input module, output module) return the input of the first
    and the output of the second (first element of a tuple)."""
    torch, _ = hf
    got, hooks = {}, []
    for k, (mi, mo) in enumerate(pairs):
        hooks.append(mi.register_forward_pre_hook(
            lambda m, args, kw=None, k=k: got.__setitem__(("in", k), args[0].detach().clone())))
        hooks.append(mo.register_forward_hook(
            lambda m, args, out, k=k: got.__setitem__(
                ("out", k), (out[0] if isinstance(out, tuple) else out).detach().clone())))
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return [(got[("in", k)][0].numpy(), got[("out", k)][0].numpy()) for k in range(len(pairs))]


def _ids(hf, n, seed):
    torch, _ = hf
    return torch.randint(0, 40, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("extra", [{}, {"scale_attn_by_inverse_layer_idx": True}])
def test_gpt2_attention_matches_transformers(hf, tmp_path, extra):
    model, path = _build(hf, "gpt2", tmp_path, seed=1, **extra)
    imp = ck.load(path)
    assert imp.arch == "gpt2" and imp.causal and imp.heads == 3 and len(imp.layers) == 2
    caught = _capture(hf, model, [(b.ln_1, b.attn) for b in model.h], _ids(hf, 11, 2))
    for ell, (x, attn_out) in enumerate(caught):
        assert _rel(ck.attention_update(imp, ell, x), attn_out) < TOL
    # one attention-only pre-LN layer x + A(LN(x)) (the block's own residual add, read at
    # the input of ln_2) is one Euler step of size Δt = 1 of the imported flow
    torch, _ = hf
    got = {}
    hk = [model.h[0].ln_1.register_forward_pre_hook(lambda m, a: got.__setitem__("x", a[0])),
          model.h[0].ln_2.register_forward_pre_hook(lambda m, a: got.__setitem__("y", a[0]))]
    with torch.no_grad():
        model(input_ids=_ids(hf, 9, 3))
    for h in hk:
        h.remove()
    x, y = got["x"][0].numpy(), got["y"][0].numpy()
    dt = 1.0
    assert _rel(x + dt * ck.attention_update(imp, 0, x), y) < TOL


def test_bert_attention_matches_transformers(hf, tmp_path):
    model, path = _build(hf, "bert", tmp_path, seed=4)
    imp = ck.load(path)
    assert imp.arch == "bert" and not imp.causal and imp.placement == "post"
    lay = model.encoder.layer
    # the input of the LayerNorm in front of layer ℓ's attention, and output.dense's output
    pairs = [(model.embeddings.LayerNorm, lay[0].attention.output.dense),
             (lay[0].output.LayerNorm, lay[1].attention.output.dense)]
    for ell, (x, dense_out) in enumerate(_capture(hf, model, pairs, _ids(hf, 10, 5))):
        assert _rel(ck.attention_update(imp, ell, x), dense_out) < TOL


def test_opt_attention_matches_transformers(hf, tmp_path):
    """OPT: learned absolute positions, separate q/k/v projections with biases (the query
    scaled by 1/√r after its bias), pre-LN decoder: the input of ``self_attn_layer_norm``
    and the output of ``out_proj``, from the model's own forward."""
    model, path = _build(hf, "opt", tmp_path, seed=8)
    imp = ck.load(path)
    assert imp.arch == "opt" and imp.causal and imp.placement == "pre" and imp.heads == 4
    lay = model.decoder.layers
    pairs = [(b.self_attn_layer_norm, b.self_attn.out_proj) for b in lay]
    for ell, (x, out) in enumerate(_capture(hf, model, pairs, _ids(hf, 12, 9))):
        assert _rel(ck.attention_update(imp, ell, x), out) < TOL


@pytest.mark.parametrize("kind", ["roberta", "distilbert", "bart"])
def test_bert_like_encoders_match_transformers(hf, tmp_path, kind):
    """RoBERTa (BERT's layout under ``roberta.``, ε = 1e-5), DistilBERT (``q_lin`` ...,
    ``output_layer_norm`` in front of the next layer, ε = 1e-12) and BART's encoder
    (``layernorm_embedding``, then ``final_layer_norm``; the decoder left out): the input of
    the LayerNorm in front of layer ℓ's attention and the attention output projection's
    output."""
    model, path = _build(hf, kind, tmp_path, seed=5)
    imp = ck.load(path)
    assert imp.arch == kind and not imp.causal and imp.placement == "post"
    if kind == "roberta":
        lay = model.encoder.layer
        pairs = [(model.embeddings.LayerNorm, lay[0].attention.output.dense),
                 (lay[0].output.LayerNorm, lay[1].attention.output.dense)]
    elif kind == "distilbert":
        lay = model.transformer.layer
        pairs = [(model.embeddings.LayerNorm, lay[0].attention.out_lin),
                 (lay[0].output_layer_norm, lay[1].attention.out_lin)]
    else:  # BART's encoder: layer ℓ reads layer ℓ-1's final_layer_norm
        enc = model.encoder
        pairs = [(enc.layernorm_embedding, enc.layers[0].self_attn.out_proj),
                 (enc.layers[0].final_layer_norm, enc.layers[1].self_attn.out_proj)]
    for ell, (x, out) in enumerate(_capture(hf, model, pairs, _ids(hf, 10, 6))):
        assert _rel(ck.attention_update(imp, ell, x), out) < TOL


def test_opt_is_not_refused_as_rotary_and_post_ln_opt_is(hf, tmp_path):
    """The name ``self_attn.q_proj`` (OPT, BART, Whisper) is no rotary evidence; OPT with
    ``do_layer_norm_before = false`` (opt-350m) is outside the mapping."""
    _, path = _build(hf, "opt", tmp_path, seed=1)
    assert ck.load(path).arch == "opt"
    with pytest.raises(ConfigError, match="tensor 'h.0.attn.c_attn.weight' missing: not a "
                                          "gpt2 checkpoint"):
        ck.load(path, arch="gpt2")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "do_layer_norm_before": False}))
    with pytest.raises(ConfigError, match="do_layer_norm_before = False: the opt mapping"):
        ck.load(path)


def test_albert_shared_layers_match_transformers(hf, tmp_path):
    model, path = _build(hf, "albert", tmp_path, seed=6)
    imp = ck.load(path)
    assert imp.arch == "albert" and imp.shared and len(imp.layers) == 3
    assert imp.layers[1] is imp.layers[2]  # one frozen set of weights
    layer = model.encoder.albert_layer_groups[0].albert_layers[0]
    got, hooks = [], []
    hooks.append(layer.full_layer_layer_norm.register_forward_pre_hook(
        lambda m, a: got.append(("ln", a[0][0].numpy().copy()))))
    hooks.append(layer.attention.dense.register_forward_hook(
        lambda m, a, o: got.append(("out", o[0].numpy().copy()))))
    hooks.append(model.embeddings.LayerNorm.register_forward_pre_hook(
        lambda m, a: got.append(("ln", a[0][0].numpy().copy()))))
    torch, _ = hf
    with torch.no_grad():
        model(input_ids=_ids(hf, 8, 7))
    for h in hooks:
        h.remove()
    # the order of the calls: LN in front of layer 0, out 0, LN in front of 1, out 1, ...
    ins = [a for k, a in got if k == "ln"]
    outs = [a for k, a in got if k == "out"]
    for ell in range(3):
        assert _rel(ck.attention_update(imp, ell, ins[ell]), outs[ell]) < TOL


# ---------------------------------------------------------------------- no torch needed
def _write_gpt2(tmp_path, d=8, H=2, L=2, seed=0, drop=None, reshape=None, config=True,
                zero_bias=False):
    """A random GPT-2-named checkpoint written with safetensors.numpy (``zero_bias``: query
    and LayerNorm biases zero, so no per-key logit term)."""
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(seed)
    t = {}
    for ell in range(L):
        t[f"h.{ell}.attn.c_attn.weight"] = rng.normal(size=(d, 3 * d))
        t[f"h.{ell}.attn.c_attn.bias"] = rng.normal(size=3 * d)
        t[f"h.{ell}.attn.c_proj.weight"] = rng.normal(size=(d, d))
        t[f"h.{ell}.attn.c_proj.bias"] = rng.normal(size=d)
        t[f"h.{ell}.ln_1.weight"] = 1 + 0.3 * rng.normal(size=d)
        t[f"h.{ell}.ln_1.bias"] = rng.normal(size=d)
        if zero_bias:
            t[f"h.{ell}.attn.c_attn.bias"][:d] = 0.0
            t[f"h.{ell}.ln_1.bias"][:] = 0.0
    if drop:
        del t[drop]
    if reshape:
        t[reshape] = t[reshape][:-1]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    st.save_file(t, str(folder / "model.safetensors"))
    if config:
        (folder / "config.json").write_text(json.dumps(
            {"model_type": "gpt2", "n_head": H, "layer_norm_epsilon": 0.0}))
    return folder, t


def _dense_update(t, ell, X, H):
    """The GPT-2 attention written out from the raw tensors (ε = 0)."""
    d = X.shape[1]
    r = d // H
    Z = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)
    Xin = Z * t[f"h.{ell}.ln_1.weight"] + t[f"h.{ell}.ln_1.bias"]
    QKV = Xin @ t[f"h.{ell}.attn.c_attn.weight"] + t[f"h.{ell}.attn.c_attn.bias"]
    Q, K, V = QKV[:, :d], QKV[:, d:2 * d], QKV[:, 2 * d:]
    n = len(X)
    heads = []
    for h in range(H):
        sl = slice(h * r, (h + 1) * r)
        S = Q[:, sl] @ K[:, sl].T / np.sqrt(r)
        S = np.where(np.tril(np.ones((n, n), bool)), S, -np.inf)
        P = np.exp(S - S.max(1, keepdims=True))
        heads.append((P / P.sum(1, keepdims=True)) @ V[:, sl])
    return np.hstack(heads) @ t[f"h.{ell}.attn.c_proj.weight"] + t[f"h.{ell}.attn.c_proj.bias"]


def test_mapping_against_the_dense_formula_and_roundtrip(tmp_path):
    folder, t = _write_gpt2(tmp_path)
    imp = ck.load(folder)
    X = np.random.default_rng(1).normal(size=(7, 8))
    for ell in range(2):
        assert _rel(ck.attention_update(imp, ell, X), _dense_update(t, ell, X, 2)) < TOL
    # tokens on the sphere (ε = 0) give the same update as their hidden states
    U = ck.tokens_from_hidden(X)
    assert np.allclose(np.linalg.norm(U, axis=1), 1) and np.allclose(U.sum(1), 0, atol=1e-14)
    assert _rel(ck.attention_update(imp, 0, U, tokens=True), ck.attention_update(imp, 0, X)) < TOL
    # the factors act on 1^⊥ only
    assert np.allclose(imp.layers[0].A.sum(axis=2), 0, atol=1e-12)
    out = imp.save(tmp_path / "w.npz")
    back = ck.read_imported(out)
    assert back.arch == "gpt2" and back.causal and len(back.layers) == 2
    assert _rel(ck.attention_update(back, 1, X), ck.attention_update(imp, 1, X)) == 0
    b, a = imp.layers[0].beta(), imp.layers[0].antisymmetry()
    assert b.shape == (2,) and np.all((a >= 0) & (a <= 1))


def test_symmetric_and_antisymmetric_fraction():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(1, 3, 5))
    lay = ck.ImportedLayer(A, A.copy(), A, np.zeros((1, 5, 3)), np.zeros((1, 5)), np.zeros(5), 0.0)
    assert lay.antisymmetry()[0] < 1e-15
    assert np.isclose(lay.beta()[0], np.linalg.norm(A[0].T @ A[0], 2))


@pytest.mark.parametrize("case, expect", [
    ({"drop": "h.1.attn.c_proj.bias"}, "'h.1.attn.c_proj.bias' missing (expected shape (8,))"),
    ({"reshape": "h.0.ln_1.weight"}, "'h.0.ln_1.weight' has shape (7,), expected (8,)"),
    ({"config": False}, "head count"),
])
def test_bad_checkpoints_are_one_line(tmp_path, case, expect):
    folder, _ = _write_gpt2(tmp_path, **case)
    with pytest.raises(ConfigError) as e:
        ck.load(folder)
    assert expect in str(e.value)


def test_unknown_and_rotary_are_refused(tmp_path):
    folder, _ = _write_gpt2(tmp_path)
    with pytest.raises(ConfigError, match="unknown architecture 'llama2': known are gpt2, bert"):
        ck.load(folder, arch="llama2")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_neox", "n_head": 2}))
    with pytest.raises(ConfigError, match="rotary position encodings"):
        ck.load(folder)
    # rotary from the configuration's keys, whatever the model type
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 2,
                                                    "rope_theta": 1e4}))
    with pytest.raises(ConfigError, match=r"rotary position encodings \(config key 'rope_theta'"):
        ck.load(folder)
    # an unknown model type is refused by its name, even where tensor names would match
    (folder / "config.json").write_text(json.dumps({"model_type": "t5", "n_head": 2}))
    with pytest.raises(ConfigError, match=r"unknown architecture 't5' \(model_type\): known are "
                                          r"gpt2, bert, albert, roberta, distilbert, bart, opt$"):
        ck.load(folder)


def test_opt_names_are_no_rotary_evidence(tmp_path):
    """Tensors named ``self_attn.q_proj`` without a configuration: found as OPT's, mapped
    exactly (the dense formula with separate projections and the query bias)."""
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(4)
    d, H = 8, 2
    t = {}
    for k in ("q", "k", "v"):
        t[f"model.decoder.layers.0.self_attn.{k}_proj.weight"] = rng.normal(size=(d, d))
        t[f"model.decoder.layers.0.self_attn.{k}_proj.bias"] = rng.normal(size=d)
    t["model.decoder.layers.0.self_attn.out_proj.weight"] = rng.normal(size=(d, d))
    t["model.decoder.layers.0.self_attn.out_proj.bias"] = rng.normal(size=d)
    t["model.decoder.layers.0.self_attn_layer_norm.weight"] = 1 + 0.3 * rng.normal(size=d)
    t["model.decoder.layers.0.self_attn_layer_norm.bias"] = rng.normal(size=d)
    st.save_file(t, str(tmp_path / "opt.safetensors"))
    imp = ck.load(tmp_path / "opt.safetensors", heads=H)
    assert imp.arch == "opt" and imp.causal and imp.embeddings is None
    X = rng.normal(size=(5, d))
    Z = (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + 1e-5)
    p = "model.decoder.layers.0.self_attn."
    Xin = Z * t["model.decoder.layers.0.self_attn_layer_norm.weight"] + t[
        "model.decoder.layers.0.self_attn_layer_norm.bias"]
    Q, K, V = (Xin @ t[p + f"{k}_proj.weight"].T + t[p + f"{k}_proj.bias"] for k in "qkv")
    r = d // H
    heads = []
    for h in range(H):
        sl = slice(h * r, (h + 1) * r)
        S = np.where(np.tril(np.ones((5, 5), bool)), Q[:, sl] @ K[:, sl].T / np.sqrt(r), -np.inf)
        P = np.exp(S - S.max(1, keepdims=True))
        heads.append((P / P.sum(1, keepdims=True)) @ V[:, sl])
    ref = np.hstack(heads) @ t[p + "out_proj.weight"].T + t[p + "out_proj.bias"]
    assert _rel(ck.attention_update(imp, 0, X), ref) < TOL


def test_sharded_checkpoint(tmp_path):
    folder, t = _write_gpt2(tmp_path)
    st = pytest.importorskip("safetensors.numpy")
    names = sorted(t)
    (folder / "model.safetensors").unlink()
    st.save_file({k: t[k] for k in names[:5]}, str(folder / "a.safetensors"))
    st.save_file({k: t[k] for k in names[5:]}, str(folder / "b.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: "a.safetensors" if i < 5 else "b.safetensors"
                        for i, k in enumerate(names)}}))
    X = np.random.default_rng(2).normal(size=(5, 8))
    assert _rel(ck.attention_update(ck.load(folder), 1, X), _dense_update(t, 1, X, 2)) < TOL


def test_settings_outside_the_mapping_are_refused(tmp_path):
    folder, _ = _write_gpt2(tmp_path)
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_head": 2, "add_cross_attention": True}))
    with pytest.raises(ConfigError, match="add_cross_attention = True: the gpt2 mapping"):
        ck.load(folder)


def test_unreadable_checkpoints(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read the safetensors checkpoint"):
        ck.load(bad)
    with pytest.raises(ConfigError, match="no model.safetensors"):
        ck.load(tmp_path)
    with pytest.raises(ConfigError, match="allowed is '.safetensors'"):
        ck.load(_touch(tmp_path / "w.bin"))


def _touch(p):
    p.write_bytes(b"")
    return p


def test_hidden_states_are_initial_tokens(tmp_path):
    """tokens_from_hidden gives unit rows in 1^⊥: a tokens file a run reads as it is."""
    from wflow.engine.initial import _load_tokens

    H = np.random.default_rng(5).normal(3.0, 2.0, size=(6, 4))
    np.savez(tmp_path / "tokens.npz", X=ck.tokens_from_hidden(H))
    X = _load_tokens(tmp_path / "tokens.npz", 6, 4)
    assert np.allclose(X, ck.tokens_from_hidden(H), rtol=0, atol=1e-15)


def test_cli_import_weights(tmp_path, capsys):
    folder, _ = _write_gpt2(tmp_path)
    out = tmp_path / "w.npz"
    assert main(["import-weights", str(folder), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "antisym" in text and out.is_file()
    assert len(ck.read_imported(out).layers) == 2
    # bad input: exit 2, one line, nothing written
    bad = tmp_path / "bad.npz"
    assert main(["import-weights", str(folder), "--arch", "llama", "-o", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "known are gpt2, bert, albert, roberta, distilbert, bart, opt" in err
    assert not bad.exists() and not list(tmp_path.glob(".bad*"))
    assert main(["import-weights", str(tmp_path / "none.safetensors"), "-o", str(bad)]) == 2
    assert not bad.exists()
