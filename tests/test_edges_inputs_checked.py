"""Bad input refused up front, in one line naming the key, the file or the layer (exit 2):
imported checkpoints with huge weights or a bad config.json, an imported-weights file with a
non-finite array, a seed that does not fit the result file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_checkpoint import _write_gpt2
from test_cli import one_line, run_cli

from wflow import config as C
from wflow.cli import main
from wflow.errors import ConfigError
from wflow.model import checkpoint as ck


def _import(tmp_path, capsys, folder):
    out = tmp_path / "w.npz"
    rc, stdout, err = run_cli(capsys, "import-weights", folder, "-o", out)
    return rc, stdout, err, out


def test_huge_finite_weights_are_refused_naming_the_layer(tmp_path, capsys):
    """Weights of 1e200 are finite, their products (D_h, β_h) are not."""
    st = pytest.importorskip("safetensors.numpy")
    folder, t = _write_gpt2(tmp_path)
    t["h.1.attn.c_attn.weight"] = t["h.1.attn.c_attn.weight"] * 1e200
    st.save_file(t, str(folder / "model.safetensors"))
    rc, stdout, err, out = _import(tmp_path, capsys, folder)
    assert rc == 2 and "nan" not in stdout.lower()
    assert "layer 1: the mapped" in one_line(err) and "overflows float64" in err
    assert not out.exists()


@pytest.mark.parametrize("key, value, expect", [
    ("layer_norm_epsilon", float("nan"), "config.json layer_norm_epsilon = nan: the LayerNorm "
                                         "epsilon must be a finite number >= 0"),
    ("layer_norm_epsilon", -1, "config.json layer_norm_epsilon = -1: the LayerNorm epsilon "
                               "must be a finite number >= 0"),
    ("layer_norm_epsilon", "small", "config.json layer_norm_epsilon = 'small'"),
    ("n_head", "two", "config.json n_head = 'two': must be an integer >= 1"),
    ("n_head", 2.5, "config.json n_head = 2.5: must be an integer >= 1"),
    ("n_head", True, "config.json n_head = True: must be an integer >= 1"),
])
def test_bad_config_json_values_are_one_line(tmp_path, capsys, key, value, expect):
    folder, _ = _write_gpt2(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    rc, _, err, out = _import(tmp_path, capsys, folder)
    assert rc == 2 and expect in one_line(err)
    assert not out.exists()


@pytest.mark.parametrize("array, value", [("key_bias", np.nan), ("A", np.nan),
                                          ("drift", np.inf), ("eps", -1.0)])
def test_imported_file_arrays_are_checked_before_the_run(tmp_path, capsys, array, value):
    """A non-finite array of the imported-weights file: refused at validation, naming the
    file and the array (not a key the user never set), nothing written."""
    folder, _ = _write_gpt2(tmp_path, d=4, H=2, L=2)
    good = tmp_path / "good.npz"
    assert main(["import-weights", str(folder), "-o", str(good)]) == 0
    capsys.readouterr()
    with np.load(good) as f:
        arrays = {k: f[k] for k in f.files}
    x = arrays[f"layer1/{array}"].copy()
    x.flat[0] = value
    arrays[f"layer1/{array}"] = x
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ConfigError, match=f"array 'layer1/{array}'"):
        ck.read_imported(tmp_path / "bad.npz")
    tokens = tmp_path / "X.npz"
    np.savez(tokens, X=ck.tokens_from_hidden(np.random.default_rng(0).normal(size=(6, 4))))
    out = tmp_path / "r.h5"
    rc, _, err = run_cli(capsys, "run", "--set", "model.interaction=general",
                         "--set", "weights.process=imported", "--set",
                         f"weights.imported={tmp_path / 'bad.npz'}", "--set", "model.d=4",
                         "--set", "model.heads=2", "--set", "model.n=6", "--set", "solver.dt=0.5",
                         "--set", "solver.T=2", "--set", "model.sign=ascent",
                         "--set", "model.head_combine=sum", "--set", "model.mask=causal",
                         "--set", "init.tokens=file", "--set", f"init.tokens_file={tokens}",
                         "--set", "solver.backend=numpy",
                         "-o", out, "-q")
    line = one_line(err)
    assert rc == 2 and f"weights.imported = '{tmp_path / 'bad.npz'}': array 'layer1/{array}'" \
        in line, line
    assert "weights.layers" not in line
    assert not out.exists()


def test_seed_beyond_64_bits_is_refused_at_validation(tmp_path, capsys):
    C.validate({"init": {"seed": 2**64 - 1}})
    with pytest.raises(ConfigError, match=r"init.seed = 18446744073709551616: must be an "
                                          r"integer in 0\.\.18446744073709551615"):
        C.validate({"init": {"seed": 2**64}})
    rc, _, err = run_cli(capsys, "validate", "--set", f"init.seed={2**64}")
    assert rc == 2 and "init.seed" in one_line(err)
