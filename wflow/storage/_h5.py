r"""Low-level HDF5 helpers of the result files (see :mod:`wflow.storage.io` for the layout and the
checkpoint protocol): opening with retries, record datasets, checkpoint slots (the disk
reservation and the writers' lock: :mod:`wflow.storage._locks`). Storage only: nothing here
knows the model or the run loop."""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

import h5py
import numpy as np

from wflow.errors import ConfigError

#: the format this wflow writes; ``FORMAT_VERSION`` is also stored as an integer attribute.
#: Version 2 added the ``failed`` status, fletcher32 checksums on the datasets and the git
#: provenance; version 1 files read as before (the attributes they lack are optional).
FORMAT_VERSION = 2
FORMAT = f"wflow-results/{FORMAT_VERSION}"
READABLE_FORMATS = ("wflow-results/1", FORMAT)
RUNNING, COMPLETE, FAILED = "running", "complete", "failed"
SLOTS = ("a", "b")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
CHUNK_BYTES = 2**16  # target chunk size (at least one record)
log = logging.getLogger("wflow.storage.io")

# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _versions() -> dict:
    """Versions of the libraries a result depends on."""
    return dict(_library_versions())


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple:
    """Read once per process: the package metadata lookup costs ≈ 15 ms, a tenth of a tiny
    run written to a file."""
    out = []
    for lib in ("numpy", "numba", "h5py", "scipy"):
        try:
            out.append((lib, metadata.version(lib)))
        except metadata.PackageNotFoundError:
            out.append((lib, "not installed"))
    out.append(("hdf5", h5py.version.hdf5_version))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _git() -> dict:
    """``{"commit": sha, "dirty": bool}`` of the git checkout wflow runs from (tracked files
    modified: dirty); ``{}`` when wflow is not run from a git checkout or git is missing."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return {}
    try:
        def git(*args):
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=10, check=True).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit, "dirty": dirty} if commit else {}


def _machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count()}


def _attr_str(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


#: datasets at the root of a result file (the time, the snapshots: tokens X or the cell
#: averages rho of a density run, weights D); every other series under ``series/``
ROOT_DATASETS = ("t", "X", "rho", "D")


def _dataset_name(key: str) -> str:
    return key if key in ROOT_DATASETS else f"series/{key}"


def _config_json(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True, allow_nan=False)


def _looks_hdf5(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    if head == _HDF5_SIGNATURE:
        return True
    try:  # a user block moves the signature to 512, 1024, ...
        return bool(h5py.is_hdf5(os.fspath(path)))
    except Exception:  # noqa: BLE001
        return False


class CorruptFile(OSError):
    """A dataset or group that does not read back (retried: a writer may be at work)."""


def _retry(fn, attempts, errors, what):
    """``fn()``, retried with a short exponential back-off on ``errors``; after the last
    attempt the error becomes one ConfigError line ``what (first line of the error)``."""
    delay = 0.01
    for attempt in range(attempts):
        try:
            return fn()
        except ConfigError:
            raise
        except errors as exc:
            if attempt == attempts - 1:
                if isinstance(exc, CorruptFile):
                    raise ConfigError(str(exc)) from None
                msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ConfigError(f"{what} ({msg})") from None
            time.sleep(delay)
            delay = min(2 * delay, 0.2)
    raise AssertionError("unreachable")  # pragma: no cover


def _open_read(path: Path, retries: int = 20):
    """Open for reading; retry briefly (a writer may hold the file for a moment)."""
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a result file")
    if not _looks_hdf5(path):
        raise ConfigError(f"{path}: not an HDF5 file")
    return _retry(lambda: h5py.File(path, "r"), retries, OSError,
                  f"{path}: cannot open the HDF5 file")


_TRANSIENT = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def _with_file(path, fn, attempts: int = 12):
    """``fn(f)`` on the file opened for reading, with the format checked.

    A concurrent writer can leave the file briefly inconsistent for a reader (HDF5
    is not transactional), so low-level read errors are retried for about a second
    before they become a one-line ConfigError.
    """
    path = Path(path)

    def once():
        with _open_read(path) as f:
            _check_format(f, path)
            return fn(f)

    return _retry(once, attempts, _TRANSIENT, f"{path}: cannot read the result file")


def _open_write(path: Path):
    # HDF5's own file lock is off for writers: exclusion among writers is the sidecar
    # lock, and readers must not block (or be blocked by) a running simulation.
    try:
        return h5py.File(path, "r+", locking=False)
    except TypeError:  # pragma: no cover - h5py < 3.5
        return h5py.File(path, "r+")


def _check_format(f, path: Path):
    fmt = _attr_str(f.attrs.get("format"))
    if fmt is None:
        raise ConfigError(f"{path}: not a wflow result file (no 'format' attribute)")
    if not str(fmt).startswith("wflow-results/"):
        raise ConfigError(f"{path}: not a wflow result file (format {fmt!r})")
    if fmt not in READABLE_FORMATS:
        raise ConfigError(f"{path}: unsupported result format {fmt!r} (this wflow reads "
                          f"{', '.join(READABLE_FORMATS)})")
    if "config" not in f.attrs:
        raise ConfigError(f"{path}: no stored configuration (attribute 'config' missing)")


def _stored_config(f, path: Path) -> dict:
    try:
        cfg = json.loads(_attr_str(f.attrs["config"]))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: stored configuration is not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: stored configuration is not a table")
    return cfg


def _generic_description(name):
    """(description, units, dims) of a record dataset nobody described."""
    dims = ("record",) if name == "t" else ("record", "path")
    return f"result series {name!r}", "see docs/model.md §10", dims


#: what h5py stores for a Python ``str`` attribute: a variable-length UTF-8 string, scalar
_VLEN_STR = h5py.string_dtype()
_VLEN_STR_FILE = h5py.h5t.py_create(_VLEN_STR, logical=True)
_VLEN_STR_MEM = h5py.h5t.py_create(_VLEN_STR)
#: h5py's link creation list (``series/<name>``: the group is created if missing)
_LCPL = h5py.h5p.create(h5py.h5p.LINK_CREATE)
_LCPL.set_create_intermediate_group(True)


def _new_str_attrs(obj_id, items):
    """Attributes ``name = text`` on a new object, stored exactly as ``obj.attrs[name] = text``
    stores them (a scalar variable-length UTF-8 string), through h5py's low-level calls: the
    high-level path (dtype guessing, an existence check, two type conversions per attribute)
    costs about as much again as HDF5 itself."""
    space = h5py.h5s.create_simple(())
    for name, text in items:
        attr = h5py.h5a.create(obj_id, name.encode("ascii"), _VLEN_STR_FILE, space)
        try:
            attr.write(np.array(text, dtype=_VLEN_STR), mtype=_VLEN_STR_MEM)
        finally:
            attr.close()


def _create_record_dataset(f, name, key, data, n0, describe=_generic_description):
    """A new record dataset ``name`` (chunked, resizable along the records, checksummed,
    described by its attributes) of ``n0 + len(data)`` records; ``data`` is written at
    ``n0`` (the records before are the fill value: they exist only in a file resumed
    from a checkpoint written before this series first appeared)."""
    row_shape = data.shape[1:]
    row_bytes = max(1, int(np.prod(row_shape, dtype=np.int64)) * data.dtype.itemsize)
    chunk_rows = int(max(1, min(256, CHUNK_BYTES // row_bytes)))
    n = n0 + len(data)
    # what ``f.create_dataset(name, shape=(n, ...), maxshape=(None, ...), chunks=(chunk_rows,
    # ...), fletcher32=True, fillvalue=nan)`` creates, through h5py's low-level calls
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((chunk_rows,) + row_shape)
    dcpl.set_fletcher32()
    if data.dtype.kind == "f":
        dcpl.set_fill_value(np.array(np.nan))
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(0)
    space = h5py.h5s.create_simple((n,) + row_shape, (h5py.h5s.UNLIMITED,) + row_shape)
    dsid = h5py.h5d.create(f.id, name.encode("utf-8"), h5py.h5t.py_create(data.dtype, logical=1),
                           space, dcpl=dcpl, lcpl=_LCPL)
    desc, units, dims = describe(key)
    if len(dims) != len(data.shape):  # a description that does not fit: name the axes only
        dims = ("record",) + tuple(f"axis{i}" for i in range(1, len(data.shape)))
    _new_str_attrs(dsid, (("description", desc), ("units", units),
                           ("shape", "(" + ", ".join(dims) + ")"),
                           ("dims", json.dumps(list(dims)))))
    if n0 == 0 and data.dtype.kind in "fiu":  # a plain number type: no conversion
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
    else:
        h5py.Dataset(dsid)[n0:n] = data


def _append_records(f, name, data, n0):
    """Write ``data`` (records, ...) at record ``n0`` of the existing record dataset ``name``,
    grown to ``n0 + len(data)`` records (h5py's ``ds.resize``, ``ds[n0:] = data``, in its
    low-level calls for plain number types); ``None`` when done, else the row shape the file
    holds when it differs from ``data``'s."""
    dsid = h5py.h5d.open(f.id, name.encode("utf-8"))
    shape = dsid.shape
    if shape[1:] != data.shape[1:]:
        return shape[1:]
    n = n0 + len(data)
    dsid.set_extent((n,) + shape[1:])
    if data.dtype.kind not in "fiu" or len(data) == 0:
        h5py.Dataset(dsid)[n0:n] = data
        return None
    data = np.ascontiguousarray(data)
    fspace = dsid.get_space()
    fspace.select_hyperslab((n0,) + (0,) * (data.ndim - 1), data.shape)
    dsid.write(h5py.h5s.create_simple(data.shape), fspace, data)
    return None


def _put(g, name, value):
    """Overwrite dataset ``name`` in place when shape and dtype match, else recreate it."""
    value = np.asarray(value)
    try:  # h5py's low-level calls: a checkpoint overwrites a few dozen small arrays
        dsid = h5py.h5d.open(g.id, name.encode("utf-8"))
    except KeyError:
        dsid = None
    if dsid is not None and dsid.dtype == value.dtype and dsid.shape != value.shape:
        ds = h5py.Dataset(dsid)  # a resizable one (its leading axis) is resized in place
        if (ds.maxshape is not None and len(ds.maxshape) == value.ndim and value.size
                and ds.maxshape[0] is None and ds.maxshape[1:] == value.shape[1:]):
            ds.resize(value.shape)
    if dsid is not None and dsid.shape == value.shape and dsid.dtype == value.dtype:
        if value.dtype.kind in "fiu" and value.size:
            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(value))
        else:
            h5py.Dataset(dsid)[...] = value
        return
    if dsid is not None:  # (the space it held is not reused once the file is closed)
        del g[name]
    if value.ndim and value.size:  # checksummed (the filter needs a chunked layout), its
        # leading axis resizable: an array whose length changes between checkpoints (the
        # step ledger since the last record) is rewritten in place, not recreated
        g.create_dataset(name, data=value, chunks=_slot_chunks(value), fletcher32=True,
                         maxshape=(None,) + value.shape[1:])
    else:
        g.create_dataset(name, data=value)


def _slot_chunks(value) -> tuple:
    """Chunk shape of a checkpoint array: whole rows of its leading axis, as many as fit
    :data:`CHUNK_BYTES` (at least one, at most the array's length), so the chunks
    allocate at most one partial chunk of rows beyond the array (h5py's guess splits the
    trailing axes too: (P, n, 3) in chunks of (·, ·, 2) allocates a third more)."""
    row = max(1, int(np.prod(value.shape[1:], dtype=np.int64)) * value.dtype.itemsize)
    rows = max(1, min(CHUNK_BYTES // row, value.shape[0]))
    return (rows,) + value.shape[1:]


def _new_checkpoint_group(f):
    """The ``checkpoint`` group of a new file: two empty ping-pong slots."""
    ck = f.create_group("checkpoint")
    ck.attrs["description"] = (
        "two ping-pong slots; resume uses the complete one with the highest seq")
    for s in SLOTS:
        g = ck.create_group(s)
        g.attrs["complete"] = 0
        g.attrs["seq"] = 0
        g.attrs["k"] = -1
        g.attrs["n_records"] = 0
    return ck


def _write_slot(g, ckpt: dict):
    """Write a checkpoint mapping (``k``, ``X``, ``D``, ``E0`` arrays; ``cum``, ``pending``,
    ``memo`` groups of arrays; ``rng_states`` a JSON-able list) into slot ``g``."""
    for name in ("k", "X", "D", "E0"):
        value = np.asarray(ckpt[name])
        _put(g, name, value.astype(np.float64) if name in ("X", "D") else value)
    for group in ("cum", "pending", "memo"):
        items = ckpt.get(group) or {}
        sub = g.require_group(group)
        keys = sorted(items)
        for name in keys:
            _put(sub, name, np.asarray(items[name]))
        _set_attr(g, f"{group}_keys", json.dumps(keys))
    text = json.dumps([_jsonable(s) for s in ckpt["rng_states"]]).encode("utf-8")
    old = g.get("rng_states")
    cap = old.shape[0] if old is not None and old.shape[0] >= len(text) else 2 * len(text) + 64
    buf = np.full(cap, ord(" "), dtype=np.uint8)  # JSON ignores the trailing blanks
    buf[: len(text)] = np.frombuffer(text, dtype=np.uint8)
    _put(g, "rng_states", buf)
    _set_attr(g, "rng_format", "UTF-8 JSON list of numpy bit_generator.state dicts, one per path")


def _set_attr(obj, name, text):
    """``obj.attrs[name] = text`` unless it holds ``text`` already: a checkpoint slot is
    rewritten in place many times, and each new string attribute takes new space in the file
    (HDF5 does not reuse what it frees once the file is closed)."""
    if _attr_str(obj.attrs.get(name)) != text:
        obj.attrs[name] = text


def _set_time(obj, name, text):
    """A time stamp ``text`` (ISO 8601, 25 ASCII characters) stored as a fixed-length string
    attribute, overwritten in place when it exists (no new space in the file)."""
    value = np.array(text.encode("ascii"), dtype="S32")
    if name in obj.attrs and obj.attrs.get_id(name).dtype == value.dtype:
        obj.attrs.modify(name, value)
    else:
        obj.attrs[name] = value


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def _mark_complete(g):
    g.attrs.modify("complete", 1)


def _read_slot(g):
    """(checkpoint mapping, n_records, seq) of slot ``g`` (raises on any problem)."""
    if int(g.attrs.get("complete", 0)) != 1:
        raise ValueError("slot not complete")
    k = int(g["k"][()])
    if k != int(g.attrs["k"]):
        raise ValueError("slot k mismatch")
    ckpt = {"k": k, "X": np.array(g["X"][...]), "D": np.array(g["D"][...]),
            "E0": np.array(g["E0"][...])}
    for group in ("cum", "pending", "memo"):
        keys = json.loads(_attr_str(g.attrs.get(f"{group}_keys", "[]")))
        ckpt[group] = {name: np.array(g[group][name][...]) for name in keys}
    ckpt["rng_states"] = json.loads(
        bytes(np.asarray(g["rng_states"][...], dtype=np.uint8)).decode("utf-8"))
    return ckpt, int(g.attrs["n_records"]), int(g.attrs["seq"])


def _slots(f):
    """``(complete, damaged)``: the complete slots that read back, as (checkpoint mapping,
    n_records, seq, slot), newest (highest ``seq``) first; the slots that do not read back
    (a checkpoint being written is not complete, not damaged)."""
    ck = f.get("checkpoint")
    complete, damaged = [], []
    if ck is None:
        return complete, damaged
    for s in SLOTS:
        try:
            g = ck[s]
            if int(g.attrs.get("complete", 0)) != 1:
                continue
            state, n_rec, seq = _read_slot(g)
        except Exception as exc:  # noqa: BLE001 - an unusable slot is skipped
            log.debug("checkpoint slot %s unusable: %s", s, exc)
            damaged.append(s)
            continue
        complete.append((state, n_rec, seq, s))
    complete.sort(key=lambda c: -c[2])
    return complete, damaged
