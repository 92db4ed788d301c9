"""Reading model checkpoints in safetensors format: the one door to :mod:`safetensors`.

A checkpoint is a ``.safetensors`` file, or a folder holding ``model.safetensors`` (or the
shards listed by ``model.safetensors.index.json``); the ``config.json`` beside it, when
present, is read as a plain mapping. Tensors arrive as NumPy arrays
(``safetensors.numpy``: no torch). Every failure is one :class:`~wflow.errors.ConfigError`
line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wflow.errors import ConfigError

__all__ = ["read_checkpoint"]


def _load(file: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        msg = (str(exc).splitlines() or [""])[0]
        raise ConfigError(f"{file}: cannot read the safetensors checkpoint "
                          f"({type(exc).__name__}: {msg})") from None


def read_checkpoint(path) -> tuple[dict[str, np.ndarray], dict, Path]:
    """The tensors and the configuration of a safetensors checkpoint.

    Parameters
    ----------
    path : path-like
        A ``.safetensors`` file, or a folder with ``model.safetensors`` or a sharded
        ``model.safetensors.index.json``.

    Returns
    -------
    tensors : dict of str to ndarray
        Every tensor of the checkpoint, by its stored name.
    config : dict
        The ``config.json`` beside the weights, or ``{}`` when there is none.
    file : Path
        The file (or index) the tensors came from, for messages.
    """
    path = Path(path)
    if path.is_dir():
        single, index = path / "model.safetensors", path / "model.safetensors.index.json"
        if single.is_file():
            files, where = [single], single
        elif index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                raise ConfigError(f"{index}: cannot read the shard index "
                                  f"({type(exc).__name__})") from None
            files, where = [path / s for s in shards], index
        else:
            raise ConfigError(f"{path}: no model.safetensors (nor model.safetensors.index.json) "
                              f"in the folder")
        folder = path
    else:
        if not path.is_file():
            raise ConfigError(f"{path}: checkpoint not found")
        if path.suffix.lower() != ".safetensors":
            raise ConfigError(f"{path}: checkpoint suffix {path.suffix!r}: allowed is "
                              f"'.safetensors' (or a folder holding model.safetensors)")
        files, where, folder = [path], path, path.parent
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        if not f.is_file():
            raise ConfigError(f"{where}: shard {f.name} not found")
        tensors.update(_load(f))
    config: dict = {}
    cfg = folder / "config.json"
    if cfg.is_file():
        try:
            config = json.loads(cfg.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{cfg}: cannot read the model configuration "
                              f"({type(exc).__name__})") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{cfg}: the model configuration is not a JSON object")
    return tensors, config, where
