"""``wflow import-weights``: a trained checkpoint into a weights file and the configuration
that runs it [model §5c]."""

from __future__ import annotations

from pathlib import Path

from wflow.cli.commands import _output_dir, _toml
from wflow.errors import ConfigError


# ---------------------------------------------------------------------- import-weights
def cmd_import_weights(args) -> int:
    """``wflow import-weights CKPT -o OUT.npz``: the attention layers of a safetensors
    checkpoint mapped onto D_h, V_h, key logit weights and drift [model §5c]; prints
    β_h and the antisymmetric fraction per layer and head, writes ``OUT.toml`` beside the
    array file (the configuration that runs it as it is) and prints the command that runs
    it."""
    import shlex

    from wflow.model.checkpoint import load

    out = Path(args.output)
    if out.suffix.lower() != ".npz":
        raise ConfigError(f"-o {out}: output suffix {out.suffix!r}: allowed is '.npz'")
    imported = load(args.checkpoint, arch=args.arch, heads=args.heads, layers=args.layers)
    cfg = _imported_run_config(imported, out, args)
    _output_dir(out.parent)
    imported.save(out)
    toml = out.with_suffix(".toml")
    _write_text(toml, _imported_toml(imported, cfg))
    print(f"{imported.source}: {imported.arch}, {len(imported.layers)} layers, "
          f"{imported.heads} heads of width {imported.head_dim}, "
          f"{'causal' if imported.causal else 'no mask'}, {imported.placement}-LN"
          f"{', shared (frozen) layers' if imported.shared else ''}")
    print(imported.table())
    start = cfg["init"]["imported_tokens"]
    print(f"wrote {out} and {toml} ({cfg['model']['n']} tokens: "
          + {"ids": "the input embeddings of the given token ids",
             "random_ids": "the input embeddings of random token ids (init.seed)",
             "uniform": "uniform on the sphere of 1^⊥"}[start]
          + f"; t in [0, {cfg['solver']['T']:g}]: layer l on [l, l+1))")
    print("run it with:")
    print(f"  wflow run {shlex.quote(str(toml))}")
    return 0


def _imported_run_config(imported, out, args) -> dict:
    """The configuration of a run of ``imported`` as it is [model §5c]: every key the
    imported process requires, the starting tokens of ``--token-ids`` (the model's input
    embeddings), else of random ids (when the checkpoint holds the embeddings), else
    uniform on the sphere of 1^⊥."""
    d = int(imported.layers[0].V_out.shape[1])
    layers = sum(1 for lay in imported.layers if lay.d == d)
    emb = imported.embeddings
    init: dict = {"tokens": "imported"}
    if args.token_ids is not None:
        ids = _parse_ids(args.token_ids)
        if emb is None:
            raise ConfigError(f"--token-ids: the {imported.arch} import holds no input "
                              f"embeddings (not in the checkpoint, or not a sum of token and "
                              f"position rows); leave --token-ids out (uniform tokens)")
        from wflow.model.checkpoint import embedding_tokens

        try:
            embedding_tokens(imported, ids)
        except ConfigError as exc:
            raise ConfigError(f"--token-ids: {str(exc).split(': ', 1)[-1]}") from None
        init.update(imported_tokens="ids", token_ids=ids)
        n = len(ids)
    elif emb is not None:
        n = int(min(args.tokens, emb["positions"].shape[0] - emb["offset"]))
        init["imported_tokens"] = "random_ids"
    else:
        n = int(args.tokens)
        init["imported_tokens"] = "uniform"
    if n < 2:
        raise ConfigError(f"{'--token-ids' if args.token_ids is not None else '--tokens'}: "
                          f"{n} token{'s' * (n != 1)}: a run needs at least 2")
    return {
        "model": {"interaction": "general", "d": d, "heads": imported.heads, "n": n,
                  "head_combine": "sum", "sign": "ascent", "normalization": "head",
                  "mask": "causal" if imported.causal else "none", "values": "tied"},
        "init": init,
        "weights": {"process": "imported", "imported": str(out.resolve())},
        "solver": {"T": float(layers), "dt": 0.05, "record_every": 2, "paths": 1},
        "output": {"path": str(out.with_suffix(".h5"))},
    }


def _parse_ids(text) -> list:
    words = str(text).replace(",", " ").split()
    if not words or not all(w.isdigit() for w in words):
        raise ConfigError(f"--token-ids {text!r}: expected token ids, integers >= 0 separated "
                          f"by commas (e.g. 464,2068,7586)")
    return [int(w) for w in words]


def _imported_toml(imported, cfg) -> str:
    head = (f"# A run of the imported checkpoint {imported.source} ({imported.arch}) as it is "
            f"[docs/model.md §5c]:\n# written by wflow import-weights; run it with "
            f"`wflow run` of this file. Other starts: init.imported_tokens = 'ids' with\n"
            f"# init.token_ids = [...] (model.n of them), 'random_ids' or 'uniform'.\n")
    return head + _toml(cfg) + "\n"


def _write_text(path, text):
    from wflow.storage.files import replacing, write_error

    try:
        with replacing(path) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise write_error(path, exc) from None
