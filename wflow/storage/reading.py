r"""Reading wflow files: input arrays (tokens, weights), result files (arrays, attributes,
status summary, ``xarray``), and joining the result files of consecutive path batches.
Re-exported by :mod:`wflow.storage.io`; storage only (imports nothing of the model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from wflow.errors import ConfigError
from wflow.storage._damage import (  # noqa: F401
    _best_checkpoint,
    _record_keys,
    _verify_as_status,
)
from wflow.storage._h5 import (
    COMPLETE,
    FAILED,
    READABLE_FORMATS,
    RUNNING,
    _attr_str,
    _check_format,
    _config_json,
    _looks_hdf5,
    _open_read,
    _stored_config,
    _with_file,
)
from wflow.storage.files import errno_of, write_error

# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------

ARRAY_SUFFIXES = (".npz", ".h5", ".hdf5")


def read_arrays(path, keys, what="file", where=None, npy_key=None):
    """Named arrays from an input file (tokens, weights): ``.npz`` (no pickling),
    ``.h5``/``.hdf5`` (top-level datasets) or, when ``npy_key`` is given, a ``.npy`` file
    holding that one array. Returns ``{key: ndarray}`` for the ``keys`` present; every
    failure is one ConfigError line starting with ``where`` (default: the file's path), e.g.
    ``"init.tokens_file = 'x.npz'"``.
    """
    path = Path(path)
    where = str(path) if where is None else where
    suffix = path.suffix.lower()
    allowed = ARRAY_SUFFIXES + ((".npy",) if npy_key else ())
    if suffix not in allowed:
        raise ConfigError(f"{where}: {what} suffix {suffix!r}: allowed values are "
                          f"{', '.join(allowed)}")
    if not path.is_file():
        raise ConfigError(f"{where}: {what} not found")
    try:
        if suffix == ".npy":
            return {npy_key: np.asarray(np.load(path, allow_pickle=False))}
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as f:
                return {k: np.asarray(f[k]) for k in keys if k in f.files}
        with h5py.File(path, "r") as f:
            return {k: np.asarray(f[k][()]) for k in keys
                    if k in f and isinstance(f[k], h5py.Dataset)}
    except Exception as exc:  # corrupt file, object arrays (pickle refused), ...
        msg = (str(exc).splitlines() or [""])[0]
        raise ConfigError(f"{where}: cannot read {what} ({type(exc).__name__}: {msg})") from exc


def _damage(path) -> str | None:
    """One line saying why the result file ``path`` cannot be resumed (or, complete, does not
    read back), or None when it can (:func:`~wflow.storage._h5._verify_as_status`: a partial
    run whose newest checkpoint and records read back, past which a damaged record or slot
    is dropped on resume)."""
    try:
        _with_file(path, lambda f: _verify_as_status(f, path), attempts=3)
    except ConfigError as exc:
        return str(exc)
    return None


def file_status(path) -> str | None:
    """``None`` (no file), ``"complete"``, ``"running"``, ``"failed"`` (a numerical failure:
    nothing to resume) or ``"foreign"`` (not a wflow result)."""
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir() or not _looks_hdf5(path):
        return "foreign"
    try:
        with _open_read(path, retries=5) as f:
            if _attr_str(f.attrs.get("format", "")) not in READABLE_FORMATS:
                return "foreign"
            st = _attr_str(f.attrs.get("status"))
            return st if st in (COMPLETE, FAILED) else RUNNING
    except (ConfigError, OSError):
        return "foreign"


def read_header(path) -> dict:
    """Stored configuration, status, records on disk and writer version of a result file, and
    ``inputs`` (the input files the run read: dotted key -> ``{"path", "sha256"}``, the path
    absolute; ``None`` in a file written before they were stored). A complete file must read
    back whole; a partial one, its newest usable checkpoint and the records before it."""
    path = Path(path)

    def head(f):
        _verify_as_status(f, path)
        inputs = _attr_str(f.attrs.get("inputs"))
        return {"config": _stored_config(f, path), "status": _attr_str(f.attrs.get("status")),
                "error": _attr_str(f.attrs.get("error")),
                "failed_step": (int(f.attrs["failed_step"]) if "failed_step" in f.attrs
                                else None),
                "n_records": len(f["t"]) if isinstance(f.get("t"), h5py.Dataset) else 0,
                "wflow_version": _attr_str(f.attrs.get("wflow_version")),
                "format_version": int(f.attrs.get("format_version", 1)),
                "config_hash": _attr_str(f.attrs.get("config_hash")),
                "inputs": None if inputs is None else json.loads(inputs)}

    return _with_file(path, head)


def read(path, tokens=True):
    """Read a result file.

    Returns ``(config, arrays, attrs)``: the validated configuration dict, a dict of
    arrays with the names of :class:`~wflow.engine.run.Result` (``t``, every series, ``X``,
    ``D``) and the root attributes (JSON attributes decoded). With ``tokens=False``
    the snapshots ``X`` (``rho``) and ``D`` are not loaded. A partial file gives the records
    written so far (cut to a common length).
    """
    path = Path(path)

    def load(f):
        arrays = {}
        for name in _record_keys(f):
            key = name.removeprefix("series/")
            if not tokens and key in ("X", "rho", "D"):
                continue
            arrays[key] = np.asarray(f[name][...])
        return _stored_config(f, path), arrays, _root_attrs(f)

    cfg, arrays, attrs = _with_file(path, load)
    if arrays:
        n = min(len(a) for a in arrays.values())
        arrays = {k: a[:n] for k, a in arrays.items()}
    if "t" not in arrays and attrs.get("status") == COMPLETE:
        raise ConfigError(f"{path}: complete result file without dataset 't'")
    return cfg, arrays, attrs


def merge_paths(sources, dest, config, header=None, attrs=None):
    """Join complete result files holding consecutive batches of paths into one file.

    Every record dataset with a ``path`` axis (its ``dims`` attribute) is the concatenation
    of the sources' along that axis; the others (``t``) are taken from the first source and
    must agree. The joined file is complete, carries ``config`` (the whole ensemble) and
    ``header``/``attrs`` as root attributes, and no checkpoint (it needs none). It is
    written under a temporary name and renamed, so ``dest`` is either absent or complete.
    """
    dest = Path(dest)
    sources = [Path(s) for s in sources]
    tmp = dest.with_name(f".{dest.name}.merge-{os.getpid()}")
    opened = [h5py.File(s, "r", locking=False) for s in sources]
    try:
        for s, f in zip(sources, opened):
            _check_format(f, s)
            if _attr_str(f.attrs.get("status")) != COMPLETE:
                raise ConfigError(f"{s}: cannot merge a result file that is not complete")
        first = opened[0]
        with h5py.File(tmp, "w", locking=False) as out:
            for k, v in first.attrs.items():
                out.attrs[k] = v
            out.attrs["config"] = _config_json(config)
            for k, v in {**(header or {}), **(attrs or {})}.items():
                out.attrs[k] = v
            out.attrs["merged_from"] = json.dumps([s.name for s in sources])
            out.create_group("series")
            for name in _record_keys(first):
                ds = first[name]
                dims = json.loads(_attr_str(ds.attrs["dims"])) if "dims" in ds.attrs else []
                if "path" in dims:
                    ax = dims.index("path")
                    data = np.concatenate([np.asarray(f[name][...]) for f in opened], axis=ax)
                else:
                    data = np.asarray(ds[...])
                    for s, f in zip(sources[1:], opened[1:]):
                        if not np.array_equal(np.asarray(f[name][...]), data, equal_nan=True):
                            raise ConfigError(f"{s}: {name} differs from {sources[0]}'s")
                new = out.create_dataset(name, data=data, maxshape=(None,) + data.shape[1:],
                                         chunks=ds.chunks and (ds.chunks[0],) + data.shape[1:])
                for k, v in ds.attrs.items():
                    new.attrs[k] = v
            out.attrs["status"] = COMPLETE
        os.replace(tmp, dest)
    except (OSError, RuntimeError) as exc:  # a full disk: one line naming the joined file
        if isinstance(exc, RuntimeError) and errno_of(exc) is None:
            raise
        raise write_error(dest, exc) from None
    finally:
        for f in opened:
            f.close()
        if tmp.exists():
            tmp.unlink()
    return dest


def _root_attrs(f) -> dict:
    out = {}
    for k, v in f.attrs.items():
        v = _attr_str(v)
        if isinstance(v, np.generic):
            v = v.item()
        if k in ("machine", "versions", "git") and isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                pass
        out[k] = v
    return out


def inspect(path) -> dict:
    """Status summary of a result file (for ``wflow info``): config, attrs, records,
    checkpoint step (``None`` when no complete checkpoint), nsteps."""
    path = Path(path)

    def look(f):
        point = _verify_as_status(f, path)
        n_records = len(f["t"]) if isinstance(f.get("t"), h5py.Dataset) else 0
        datasets = {name: tuple(f[name].shape) for name in _record_keys(f)}
        best = _best_checkpoint(f) if point is None else (
            None if point.checkpoint is None else (point.checkpoint,))
        return _stored_config(f, path), _root_attrs(f), n_records, best, datasets

    cfg, attrs, n_records, best, datasets = _with_file(path, look)
    return {
        "path": path,
        "config": cfg,
        "attrs": attrs,
        "status": attrs.get("status"),
        "n_records": n_records,
        "checkpoint_step": None if best is None else int(best[0]["k"]),
        "nsteps": attrs.get("nsteps"),
        "datasets": datasets,
    }


def to_xarray(path):
    """The result file as an ``xarray.Dataset``; dimension names, descriptions and units come
    from each dataset's own attributes (the file describes itself)."""
    import xarray as xr  # imported here: a plain read does not pay for it

    path = Path(path)

    def meta(f):
        out = {}
        for name in _record_keys(f):
            a = f[name].attrs
            dims = json.loads(_attr_str(a["dims"])) if "dims" in a else None
            out[name.removeprefix("series/")] = (dims, _attr_str(a.get("description", "")),
                                                 _attr_str(a.get("units", "")))
        return out

    info = _with_file(path, meta)
    cfg, arrays, attrs = read(path)
    data_vars = {}
    for key, a in arrays.items():
        if key == "t":
            continue
        dims, desc, units = info.get(key, (None, "", ""))
        if dims is None or len(dims) != a.ndim:
            dims = ["record"] + [f"{key}_axis{i}" for i in range(1, a.ndim)]
        data_vars[key] = (tuple(dims), a, {"description": desc, "units": units})
    coords = {"record": np.arange(len(arrays.get("t", ()))),
              "path": np.arange(cfg["solver"]["paths"])}
    if "t" in arrays:
        coords["t"] = ("record", arrays["t"], {"description": info.get("t", (0, ""))[1]})
    ds_attrs = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in attrs.items()}
    ds_attrs["config"] = json.dumps(cfg, sort_keys=True)
    return xr.Dataset(data_vars, coords=coords, attrs=ds_attrs)
