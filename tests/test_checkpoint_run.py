"""From a checkpoint to a run in two commands [model §5c]: ``wflow import-weights CKPT -o
W.npz`` writes ``W.toml`` beside the arrays and prints the command that runs it; the starting
tokens of ``init.tokens = "imported"`` (the model's own input embeddings of token ids, random
ids, uniform on the sphere of 1^⊥) against the input of the model's first LayerNorm captured
from `transformers`' own forward."""

from __future__ import annotations

import shlex

import numpy as np
import pytest
from test_checkpoint import _build, _write_gpt2

from wflow.cli import main
from wflow.config import load_toml
from wflow.engine.run import Simulation
from wflow.errors import ConfigError
from wflow.model import checkpoint as ck
from wflow.storage import io


def _printed_command(text) -> list[str]:
    lines = text.splitlines()
    cmd = lines[lines.index("run it with:") + 1].strip()
    argv = shlex.split(cmd)
    assert argv[:2] == ["wflow", "run"] and len(argv) == 3, cmd
    return argv[1:]


def _import_and_run(capsys, ckpt, *extra):
    """``wflow import-weights CKPT -o w.npz ...`` then the command it prints, run as printed
    (from the working folder, with relative names); both exit 0. Returns the result's
    arrays and the configuration file."""
    assert main(["import-weights", str(ckpt), "-o", "w.npz", *extra]) == 0
    out = capsys.readouterr().out
    argv = _printed_command(out)
    assert argv == ["run", "w.toml"]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    _, arrays, _ = io.read("w.h5")
    return arrays, load_toml("w.toml")


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return torch, transformers


def _first_ln_input(hf, kind, model, ids):
    """The input of the LayerNorm in front of layer 0's attention, from the model's forward."""
    torch, _ = hf
    ln = {"gpt2": lambda: model.h[0].ln_1, "bert": lambda: model.embeddings.LayerNorm,
          "roberta": lambda: model.embeddings.LayerNorm,
          "distilbert": lambda: model.embeddings.LayerNorm,
          "bart": lambda: model.encoder.layernorm_embedding,
          "opt": lambda: model.decoder.layers[0].self_attn_layer_norm}[kind]()
    got = {}
    hook = ln.register_forward_pre_hook(lambda m, a: got.__setitem__("x", a[0][0].numpy()))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    hook.remove()
    return got["x"]


@pytest.mark.parametrize("kind", ["gpt2", "bert", "roberta", "distilbert", "bart", "opt"])
def test_checkpoint_to_run_in_two_commands(hf, tmp_path, monkeypatch, capsys, kind):
    """The configuration runs as it is; its first record is the model's own input
    embeddings of the given ids through the first LayerNorm's map (token plus position rows,
    BERT's token type 0, OPT's position offset 2, RoBERTa's positions after the padding id
    1, which sits at row 1), to round-off."""
    model, path = _build(hf, kind, tmp_path, seed=3)
    ids = [5, 17, 1, 39, 8, 8, 21]
    monkeypatch.chdir(tmp_path)
    arrays, cfg = _import_and_run(capsys, path.name, "--token-ids", ",".join(map(str, ids)))
    imp = ck.read_imported(tmp_path / "w.npz")
    assert cfg["model"]["n"] == len(ids) and cfg["model"]["heads"] == imp.heads
    assert cfg["model"]["mask"] == ("causal" if imp.causal else "none")
    assert cfg["solver"]["T"] == len(imp.layers)
    want = ck.tokens_from_hidden(_first_ln_input(hf, kind, model, ids))
    X0 = arrays["X"][0, 0]
    assert np.max(np.abs(X0 - want)) < 1e-12
    assert np.all(np.isfinite(arrays["X"]))
    assert np.max(np.abs(arrays["X"].sum(axis=-1))) < 1e-12  # the flow stays in 1^⊥


def test_checkpoint_without_embeddings_runs_uniform_tokens(tmp_path, monkeypatch, capsys):
    """A checkpoint of attention tensors alone (no embeddings): uniform tokens on the sphere
    of 1^⊥, ``--tokens`` of them; asking for ids is one line naming the option."""
    folder, _ = _write_gpt2(tmp_path, L=3)
    monkeypatch.chdir(tmp_path)
    arrays, cfg = _import_and_run(capsys, "ckpt", "--tokens", "6")
    assert cfg["init"]["imported_tokens"] == "uniform" and cfg["model"]["n"] == 6
    X0 = arrays["X"][0, 0]
    assert np.allclose(np.linalg.norm(X0, axis=-1), 1, rtol=0, atol=1e-14)
    assert np.max(np.abs(X0.sum(axis=-1))) < 1e-14
    assert main(["import-weights", "ckpt", "-o", "v.npz", "--token-ids", "1,2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --token-ids: the gpt2 import holds no" in err
    assert not (tmp_path / "v.npz").exists() and not (tmp_path / "v.toml").exists()


def test_uniform_start_is_uniform_on_the_sphere_of_the_orthogonal_complement(tmp_path):
    """y = P₁x/‖P₁x‖, x ~ N(0, I_d): E[y] = 0 and E[y yᵀ] = P₁/(d − 1) (isotropy on 1^⊥),
    within 5 standard errors over 4000 tokens, for two seeds."""
    folder, _ = _write_gpt2(tmp_path, d=6, H=2)
    npz = ck.load(folder).save(tmp_path / "w.npz")
    d, n = 6, 4000
    P1 = np.eye(d) - 1.0 / d
    for seed in (0, 1):
        sim = Simulation({"model": {"interaction": "general", "d": d, "heads": 2, "n": n,
                                    "head_combine": "sum", "sign": "ascent", "mask": "causal"},
                          "init": {"tokens": "imported", "imported_tokens": "uniform",
                                   "seed": seed},
                          "weights": {"process": "imported", "imported": str(npz)},
                          "solver": {"T": 0.1, "dt": 0.1, "paths": 1, "backend": "numpy"}})
        Y = sim.X0[0]
        se = 1.0 / np.sqrt(n)  # |y_a| <= 1
        assert np.max(np.abs(Y.mean(axis=0))) < 5 * se
        assert np.max(np.abs(Y.T @ Y / n - P1 / (d - 1))) < 5 * se


@pytest.mark.parametrize("change, expect", [
    ({"init": {"tokens": "imported", "imported_tokens": "ids", "token_ids": [1, 2]}},
     "init.token_ids = [1, 2]: holds 2 ids, model.n = 5: set model.n = 2"),
    ({"init": {"tokens": "imported", "imported_tokens": "ids"}},
     "give the token ids either here or in init.token_ids_file"),
    ({"init": {"tokens": "imported", "imported_tokens": "ids", "token_ids": [1, -2]}},
     "init.token_ids = [1, -2]: must be a list of token ids"),
    ({"init": {"tokens": "imported", "token_ids": [1, 2]}},
     "init.token_ids"),
    ({"init": {"tokens": "imported"}, "weights": {"process": "ou"}},
     "init.tokens = 'imported': needs weights.process = 'imported'"),
])
def test_bad_starts_are_one_line(tmp_path, change, expect):
    from wflow.config import validate

    base = {"model": {"interaction": "general", "n": 5, "d": 8, "heads": 2},
            "weights": {"process": "imported", "imported": "w.npz"}}
    for k, v in change.items():
        base[k] = {**base.get(k, {}), **v}
    with pytest.raises(ConfigError) as e:
        validate(base)
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_token_ids_from_a_file(tmp_path):
    """``init.token_ids_file``: ids separated by whitespace or commas, the same tokens as
    the list; ids beyond the vocabulary are one line."""
    rng = np.random.default_rng(2)
    d, H, V, npos = 8, 2, 11, 9
    lay = ck.ImportedLayer(*(rng.normal(size=(H, 4, d)) for _ in range(3)),
                           rng.normal(size=(H, d, 4)), rng.normal(size=(H, d)),
                           rng.normal(size=d), 1e-5)
    emb = {"tokens": rng.normal(size=(V, d)), "positions": rng.normal(size=(npos, d)),
           "extra": rng.normal(size=d), "offset": 2}
    imp = ck.ImportedModel("opt", [lay], True, "pre", H, 4, embeddings=emb)
    npz = imp.save(tmp_path / "w.npz")
    (tmp_path / "ids.txt").write_text("3, 10\n0 7\n")
    base = {"model": {"interaction": "general", "n": 4, "d": d, "heads": H,
                      "head_combine": "sum", "sign": "ascent", "mask": "causal"},
            "weights": {"process": "imported", "imported": str(npz)},
            "solver": {"T": 0.1, "dt": 0.1, "paths": 1, "backend": "numpy"}}
    a = Simulation({**base, "init": {"tokens": "imported", "imported_tokens": "ids",
                                     "token_ids_file": str(tmp_path / "ids.txt")}})
    want = emb["tokens"][[3, 10, 0, 7]] + emb["positions"][2:6] + emb["extra"]
    np.testing.assert_allclose(a.X0[0], ck.tokens_from_hidden(want), rtol=0, atol=1e-15)
    # random_ids: ids drawn uniformly from the vocabulary with the run's token stream (0,)
    b = Simulation({**base, "init": {"tokens": "imported", "imported_tokens": "random_ids",
                                     "seed": 5}})
    drawn = np.random.default_rng(np.random.SeedSequence(5, spawn_key=(0,))).integers(0, V, 4)
    np.testing.assert_array_equal(b.X0[0], ck.embedding_tokens(imp, drawn))
    with pytest.raises(ConfigError, match=r"id 11 is outside the vocabulary \[0, 11\)"):
        Simulation({**base, "init": {"tokens": "imported", "imported_tokens": "ids",
                                     "token_ids": [1, 2, 11, 0]}})
    with pytest.raises(ConfigError, match="8 ids, the model has 7 positions"):
        ck.embedding_tokens(imp, [0] * 8)  # 9 rows from offset 2: 7 positions


def test_albert_checkpoint_runs_its_shared_layer(hf, tmp_path, monkeypatch, capsys):
    """ALBERT's factored embeddings are no sum of token and position rows of width d: the
    configuration starts uniform on the sphere of 1^⊥ and runs the shared layer, frozen,
    for the layers of width d."""
    _, path = _build(hf, "albert", tmp_path, seed=2)
    monkeypatch.chdir(tmp_path)
    arrays, cfg = _import_and_run(capsys, path.name, "--tokens", "5")
    assert cfg["init"]["imported_tokens"] == "uniform" and cfg["solver"]["T"] == 2.0
    assert np.all(np.isfinite(arrays["X"])) and arrays["X"].shape[-2:] == (5, 24)


# ---------------------------------------------------------------------- the mobility series
def _npz(tmp_path, causal):
    from test_checkpoint_flow import _gpt2_npz

    npz = _gpt2_npz(tmp_path, seed=7)
    data = dict(np.load(npz))
    data["causal"] = np.array(causal)
    out = tmp_path / f"causal{int(causal)}.npz"
    np.savez(out, **data)
    return out


def _run_cfg(npz, causal, backend):
    return {"model": {"interaction": "general", "d": 8, "heads": 2, "n": 6,
                      "head_combine": "sum", "sign": "ascent",
                      "mask": "causal" if causal else "none"},
            "init": {"tokens": "imported", "imported_tokens": "uniform", "seed": 3},
            "weights": {"process": "imported", "imported": str(npz)},
            "solver": {"T": 2.0, "dt": 0.1, "paths": 1, "backend": backend,
                       "record_every": 1}}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_bidirectional_imported_run_records_the_mobility_series(tmp_path, backend):
    """Without the mask b̂ = 1/Z̄ (Z_h the partition of the key-weighted softmax), G² and
    G²_hm of the run's velocity (drift included) are recorded finite at every record, and a
    NaN there is no longer documented (it would stop the run) [model §1b, §4]."""
    from wflow.engine.records import documented_nan

    npz = _npz(tmp_path, causal=False)
    sim = Simulation(_run_cfg(npz, False, backend))
    assert "G2" not in documented_nan(sim.setup) and "b_hat_mean" not in documented_nan(sim.setup)
    X = sim.X0
    F = sim.model.evaluate(X, sim.process.at(0.5)[None])
    Zbar = F.partition[0].mean(axis=0)
    v2 = np.sum(F.velocity[0] ** 2, axis=1)
    assert np.allclose(F.b_hat[0], 1.0 / Zbar, rtol=1e-13, atol=0)
    assert np.isclose(F.G2_hm[0], np.mean(v2 * Zbar), rtol=1e-13)
    res = sim.run()
    for name in ("G2", "G2_hm", "b_hat_mean", "b_hat_min", "b_hat_max"):
        assert np.all(np.isfinite(np.asarray(getattr(res, name)))), name


def test_causal_imported_run_documents_the_missing_mobility(tmp_path):
    """Under the causal mask b̂, G², G²_hm are NaN, documented with the reason; the G²
    figure says so in one line when nothing of it can be drawn."""
    from wflow.engine.records import DOCUMENTED_NAN, documented_nan

    npz = _npz(tmp_path, causal=True)
    sim = Simulation(_run_cfg(npz, True, "numpy"))
    assert {"G2", "G2_hm", "b_hat_mean"} <= documented_nan(sim.setup)
    why = next(w for names, _, w in DOCUMENTED_NAN if "G2" in names)
    assert "not defined under the causal mask" in why
    res = sim.run()
    assert np.all(np.isnan(res.G2)) and np.all(np.isfinite(res.v2_mean))
    pytest.importorskip("matplotlib")
    from wflow.figures import plotting

    with pytest.raises(plotting.PlotInputError, match="G²: not defined under the causal mask"):
        plotting.plot(res, kind="G2", outdir=tmp_path,
                      formats=("png",))


def test_too_few_tokens_is_one_line(tmp_path, capsys):
    folder, _ = _write_gpt2(tmp_path)
    assert main(["import-weights", str(folder), "-o", str(tmp_path / "w.npz"),
                 "--tokens", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--tokens: 1 token: a run needs at least 2"), err
    assert not (tmp_path / "w.npz").exists()


def test_bart_scaled_embeddings_are_the_model_input(hf, tmp_path):
    """BART with ``scale_embedding = true`` multiplies its token rows by √d before adding the
    positions (offset 2): the tokens of ``embedding_tokens`` are the input of
    ``layernorm_embedding`` from the model's forward, mapped to the sphere."""
    model, path = _build(hf, "bart", tmp_path, seed=4, scale_embedding=True)
    imp = ck.load(path)
    ids = [3, 9, 27, 4, 11]
    want = ck.tokens_from_hidden(_first_ln_input(hf, "bart", model, ids))
    assert np.max(np.abs(ck.embedding_tokens(imp, ids) - want)) < 1e-12
