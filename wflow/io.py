r"""HDF5 result files: writing, checkpoints, resume, reading (format ``wflow-results/1``).

Layout of a result file::

    /                     attrs: format, status ("running" | "complete"), wflow_version,
    |                            config (JSON), config_hash, seed, nsteps, n_records_expected,
    |                            created, finished (ISO UTC), machine (JSON), versions (JSON),
    |                            resumes, error (last failure, if any)
    ├── t                 (records,)                 float64, model time of each record
    ├── series/<name>     (records, P)               one dataset per result series [model §10]
    ├── X                 (records, P, n, d)         token snapshots (output.store_tokens)
    ├── D                 (records, P, H, d, d)      weights (output.store_weights)
    └── checkpoint/       two ping-pong slots, never deleted, overwritten in place
        ├── a/            attrs: complete (0|1), seq, k, n_records, written
        │   ├── k, n_records              scalars
        │   ├── X (P, n, d), D (P, H, d, d), E0 (P,)
        │   ├── cum/<name> (P,)           cumulative sums
        │   ├── pending/<name> (P,)       ledger pieces of the last step (attr pending_keys)
        │   └── rng_states                uint8: UTF-8 JSON list of bit_generator.state dicts
        └── b/            same

Every record dataset is chunked and resizable along the record axis.

Checkpoint protocol (a SIGKILL at any moment leaves a usable checkpoint):

1. buffered records are written and the file flushed, so that the checkpoint never
   refers to records that are not on disk;
2. the slot *not* holding the newest complete checkpoint is marked ``complete = 0``,
   flushed; then its data are overwritten in place and flushed; then ``seq``,
   ``k``, ``n_records`` are set and ``complete = 1`` is written last and flushed.
   The other slot is never touched meanwhile, so the newest complete one survives.
3. :func:`resume` takes the complete slot with the highest ``seq`` that reads back
   cleanly, truncates every record dataset to its ``n_records``, restores the
   :class:`~wflow.run.State` and continues, appending; ``status = "complete"`` is
   set only at the very end, after every record is on disk.

The file is opened for the duration of each write (records, checkpoint, finish)
only, so other processes can read it during a run; exclusive access among writers
is an advisory lock on a sidecar ``<file>.lock`` (POSIX ``flock``, released by the
kernel if the writer dies).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from . import config as _config
from .errors import ConfigError, WflowError

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "H5Recorder",
    "run_to_file",
    "resume",
    "read",
    "to_xarray",
    "inspect",
    "file_status",
    "ResumeResult",
]

FORMAT = "wflow-results/1"
RUNNING, COMPLETE = "running", "complete"
SLOTS = ("a", "b")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: description and units of every known dataset (others get a generic description)
DESCRIPTIONS = {
    "t": ("model time of each record", "time"),
    "X": ("token snapshots x_i on the sphere", "dimensionless"),
    "D": ("weight matrices D_h", "dimensionless"),
    "energy": ("energy E(X_k; D_k)", "energy"),
    "dissipation": ("dissipation (1/n) sum <g_i, v_i>", "energy/time"),
    "G2": ("G^2 = (1/n) sum |v_i|^2 / m_bar(x_i) (reference simulation)", "energy/time"),
    "G2_hm": ("G^2_hm = (1/n) sum |v_i|^2 / b_hat(x_i)", "energy/time"),
    "v2_mean": ("mean squared speed (1/n) sum |v_i|^2", "1/time^2"),
    "b_hat_mean": ("mean effective mobility b_hat = 1/Z_bar", "dimensionless"),
    "b_hat_min": ("minimum effective mobility", "dimensionless"),
    "b_hat_max": ("maximum effective mobility", "dimensionless"),
    "Zbar_mean": ("mean partition function Z_h(x_i) over heads and tokens", "dimensionless"),
    "dEdt_drift": ("<dE/dD, f(D, t)>: energy rate of the weight drift", "energy/time"),
    "ito_expected": ("expected Ito correction rate", "energy/time"),
    "int_dissipation": ("cumulative sum dt * dissipation", "energy"),
    "int_G2": ("cumulative sum dt * G2", "energy"),
    "int_dEdt_drift": ("cumulative sum dt * dEdt_drift", "energy"),
    "int_ito_expected": ("cumulative sum dt * ito_expected", "energy"),
    "paper_martingale": ("cumulative martingale of the paper's balance", "energy"),
    "paper_residual": ("residual of the paper's energy balance (docs/model.md §6)", "energy"),
    "weight_work": ("cumulative weight part of the exact ledger", "energy"),
    "token_work": ("cumulative token part of the exact ledger", "energy"),
    "drift_work": ("cumulative drift part of the weight work", "energy"),
    "martingale": ("cumulative martingale part of the weight work", "energy"),
    "ito_realised": ("cumulative realised Ito part of the weight work", "energy"),
    "ledger_residual": ("residual of the exact ledger (docs/model.md §6)", "energy"),
    "ledger_telescoping": ("E - E0 - weight_work - token_work (rounding check)", "energy"),
    "order_parameter": ("order parameter |mean x_i|", "dimensionless"),
    "min_cosine": ("smallest pairwise cosine", "dimensionless"),
    "n_clusters": ("number of clusters at diagnostics.cluster_angle", "count"),
    "variance": ("within-sequence variance 1 - |mean x_i|^2", "dimensionless"),
    "spectral_rank": ("spectral rank of the token Gram matrix", "count"),
    "step_weight_part": ("per step: E(X_{k+1}; D_{k+1}) - E(X_{k+1}; D_k)", "energy"),
    "step_token_part": ("per step: E(X_{k+1}; D_k) - E(X_k; D_k)", "energy"),
    "step_drift": ("per step: <dE/dD(X_{k+1}; D_k), f(D_k, t_k) dt>", "energy"),
    "step_martingale": ("per step: <dE/dD(X_{k+1}; D_k), xi_k>", "energy"),
    "step_ito_realised": ("per step: weight part - drift - martingale", "energy"),
    "step_ledger_residual": ("per step: token part - sigma dt (D_k + D'_k)/2", "energy"),
}
_SHAPES = {
    "t": ("(records,)", ("record",)),
    "X": ("(records, paths, n, d)", ("record", "path", "token", "coord")),
    "D": ("(records, paths, heads, d, d)", ("record", "path", "head", "coord", "coord2")),
}
_SERIES_SHAPE = ("(records, paths)", ("record", "path"))
for _k in DESCRIPTIONS:
    if _k.startswith("step_"):  # entry [r, j]: step (r - 1) * record_every + j
        _SHAPES[_k] = ("(records, record_every, paths)", ("record", "step_in_record", "path"))

#: records kept in memory between writes (at most; fewer for large snapshots)
BUFFER_RECORDS = 64
BUFFER_BYTES = 16 * 2**20
CHUNK_BYTES = 2**16  # target chunk size (at least one record)


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _versions() -> dict:
    out = {}
    for lib in ("numpy", "numba", "h5py", "scipy"):
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "not installed"
    out["hdf5"] = h5py.version.hdf5_version
    return out


def _machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count()}


def _attr_str(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def _dataset_name(key: str) -> str:
    return key if key in ("t", "X", "D") else f"series/{key}"


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
    if fmt != FORMAT:
        raise ConfigError(f"{path}: unsupported result format {fmt!r} (this wflow reads {FORMAT})")
    if "config" not in f.attrs:
        raise ConfigError(f"{path}: no stored configuration (attribute 'config' missing)")


def _stored_config(f, path: Path) -> dict:
    try:
        cfg = json.loads(_attr_str(f.attrs["config"]))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: stored configuration is not valid JSON ({exc})") from None
    try:
        return _config.validate(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{path}: stored configuration is invalid: {exc}") from None


class _Lock:
    """Advisory exclusive lock on ``<path>.lock`` (no-op where fcntl is missing)."""

    def __init__(self, path: Path):
        self.path = Path(f"{path}.lock")
        self.fd = None

    def acquire(self, target: Path):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise ConfigError(f"{target}: cannot create the lock file {self.path} "
                                  f"({exc.strerror or type(exc).__name__})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    other = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                finally:
                    os.close(fd)
                raise FileExistsError(
                    f"{target} is being written by another wflow process (pid {other})"
                ) from None
            try:  # the previous holder may have unlinked the lock file meanwhile
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        else:  # pragma: no cover
            raise FileExistsError(f"{target}: cannot lock {self.path}")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def file_status(path) -> str | None:
    """``None`` (no file), ``"complete"``, ``"running"`` or ``"foreign"`` (not a wflow result)."""
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir() or not _looks_hdf5(path):
        return "foreign"
    try:
        with _open_read(path, retries=5) as f:
            if _attr_str(f.attrs.get("format", "")) != FORMAT:
                return "foreign"
            return COMPLETE if _attr_str(f.attrs.get("status")) == COMPLETE else RUNNING
    except (ConfigError, OSError):
        return "foreign"


# --------------------------------------------------------------------------------------
# the recorder
# --------------------------------------------------------------------------------------


class H5Recorder:
    """Records a run into an HDF5 file (the recorder protocol of :meth:`Simulation.run`).

    Parameters
    ----------
    path : output file.
    config : validated configuration dict, or a :class:`~wflow.run.Simulation`.
    overwrite : replace a complete result (or a non-wflow file) at ``path``. A partial
        run is never replaced: it can only be continued with :func:`resume`.

    Methods ``record(row)``, ``checkpoint(state)``, ``finalize()`` (flush and mark the
    file complete) and ``close()`` (flush, leave it resumable).
    """

    def __init__(self, path, config, overwrite=False):
        self.path = Path(path)
        cfg = getattr(config, "config", config)
        self.config = _config.validate(cfg)
        self._init_state(n_records=0, seq=0, last_slot=None)
        parent = self.path.parent
        if not parent.is_dir():
            raise ConfigError(f"{self.path}: directory {str(parent)!r} does not exist")
        self._lock = _Lock(self.path).acquire(self.path)
        try:
            self._create(bool(overwrite))
        except BaseException:
            self._lock.release()
            raise

    @classmethod
    def _attach(cls, path, config, n_records, seq, last_slot, lock):
        self = cls.__new__(cls)
        self.path = Path(path)
        self.config = config
        self._init_state(n_records=n_records, seq=seq, last_slot=last_slot)
        self._lock = lock
        return self

    def _init_state(self, n_records, seq, last_slot):
        self.n_records = int(n_records)  # records on disk
        self._seq = int(seq)  # seq of the newest complete checkpoint
        self._last_slot = last_slot  # slot holding it
        self._buffer = []
        self._buffer_limit = None
        self._closed = False

    # ------------------------------------------------------------------ creation
    def _create(self, overwrite: bool):
        path = self.path
        status = file_status(path)
        if status == RUNNING:
            raise FileExistsError(
                f"{path} is a partial run: use `wflow resume {path}` (or delete it)"
            )
        if status == COMPLETE and not overwrite:
            raise FileExistsError(
                f"{path} already holds a complete result: use --overwrite to replace it"
            )
        if status == "foreign" and not overwrite:
            raise FileExistsError(
                f"{path} exists and is not a wflow result file: use --overwrite to replace it"
            )
        if path.is_dir():
            raise FileExistsError(f"{path} is a directory")
        # the header is written to a temporary file and renamed into place, so that a
        # kill during creation never leaves a half-written file at ``path``
        tmp = path.with_name(f".{path.name}.{os.getpid()}.creating")
        try:
            self._write_header(tmp)
            os.replace(tmp, path)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
        log.info("created %s", path)

    def _write_header(self, tmp: Path):
        cfg = self.config
        try:
            f = h5py.File(tmp, "w", locking=False)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot create the file ({exc})") from None
        with f:
            a = f.attrs
            a["format"] = FORMAT
            a["status"] = RUNNING
            a["wflow_version"] = __version__
            a["config"] = _config_json(cfg)
            a["config_hash"] = _config.config_hash(cfg)
            a["seed"] = int(cfg["init"]["seed"])
            a["nsteps"] = _config.n_steps(cfg)
            a["n_records_expected"] = len(_record_steps(cfg))
            a["created"] = _now()
            a["machine"] = json.dumps(_machine())
            a["versions"] = json.dumps(_versions())
            a["resumes"] = 0
            f.create_group("series")
            ck = f.create_group("checkpoint")
            ck.attrs["description"] = (
                "two ping-pong slots; resume uses the complete one with the highest seq"
            )
            for s in SLOTS:
                g = ck.create_group(s)
                g.attrs["complete"] = 0
                g.attrs["seq"] = 0
                g.attrs["k"] = -1
                g.attrs["n_records"] = 0

    # ------------------------------------------------------------------ records
    def record(self, row: dict):
        if self._closed:
            raise WflowError(f"{self.path}: recorder is closed")
        self._buffer.append({k: np.array(v, copy=True) for k, v in row.items()})
        if self._buffer_limit is None:
            nbytes = sum(np.asarray(v).nbytes for v in row.values()) or 1
            self._buffer_limit = max(1, min(BUFFER_RECORDS, BUFFER_BYTES // nbytes))
        if len(self._buffer) >= self._buffer_limit:
            self.flush()

    def flush(self):
        """Write the buffered records and flush the file."""
        if not self._buffer:
            return
        with _open_write(self.path) as f:
            self._write_records(f)

    def _write_records(self, f):
        rows = self._buffer
        if not rows:
            return
        n0, b = self.n_records, len(rows)
        keys = list(rows[0])
        for key in keys:
            data = np.stack([np.asarray(r[key]) for r in rows])
            name = _dataset_name(key)
            ds = f.get(name)
            if ds is None:
                ds = _create_record_dataset(f, name, key, data, n0)
            elif ds.shape[1:] != data.shape[1:]:
                raise WflowError(
                    f"{self.path}: record {key!r} has shape {data.shape[1:]}, "
                    f"the file holds {ds.shape[1:]}"
                )
            ds.resize(n0 + b, axis=0)
            ds[n0:n0 + b] = data
        f.flush()
        self.n_records = n0 + b
        self._buffer = []

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, state):
        """Write ``state`` (a :class:`~wflow.run.State`) into the free slot (see module doc)."""
        if self._closed:
            raise WflowError(f"{self.path}: recorder is closed")
        slot = SLOTS[1] if self._last_slot == SLOTS[0] else SLOTS[0]
        seq = self._seq + 1
        with _open_write(self.path) as f:
            self._write_records(f)  # 1. records first: the checkpoint refers to them
            g = f["checkpoint"][slot]
            g.attrs.modify("complete", 0)  # 2. invalidate the slot before touching it
            f.flush()
            _write_slot(g, state)
            g.attrs.modify("seq", seq)
            g.attrs.modify("k", int(state.k))
            g.attrs.modify("n_records", self.n_records)
            g.attrs["written"] = _now()
            f.flush()
            _mark_complete(g)  # 3. the completeness mark goes last
            f.flush()
        self._seq, self._last_slot = seq, slot
        log.debug("checkpoint k=%d (slot %s, seq %d, %d records)", state.k, slot, seq,
                  self.n_records)

    # ------------------------------------------------------------------ end
    def finalize(self, elapsed=None):
        """Write the remaining records, then (last) mark the file complete."""
        if self._closed:
            return
        try:
            with _open_write(self.path) as f:
                self._write_records(f)
                if "error" in f.attrs:
                    del f.attrs["error"]
                f.attrs["finished"] = _now()
                if elapsed is not None:
                    f.attrs["elapsed_last_session"] = float(elapsed)
                f.flush()
                f.attrs["status"] = COMPLETE
                f.flush()
        finally:
            self._release()
        log.info("%s complete (%d records)", self.path, self.n_records)

    def close(self, error=None):
        """Write the buffered records and release the file; it stays resumable."""
        if self._closed:
            return
        try:
            with _open_write(self.path) as f:
                self._write_records(f)
                if error is not None:
                    f.attrs["error"] = str(error).replace("\n", " ")[:1000]
                f.flush()
        finally:
            self._release()

    def _release(self):
        self._closed = True
        self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(error=exc[1] if exc[1] is not None else None)
        return False


def _record_steps(cfg) -> list:
    nsteps = _config.n_steps(cfg)
    every = int(cfg["solver"]["record_every"])
    return sorted(set(range(0, nsteps + 1, every)) | {nsteps})


def _create_record_dataset(f, name, key, data, n0):
    row_shape = data.shape[1:]
    row_bytes = max(1, int(np.prod(row_shape, dtype=np.int64)) * data.dtype.itemsize)
    chunk_rows = int(max(1, min(256, CHUNK_BYTES // row_bytes)))
    kw = {}
    if data.dtype.kind == "f":
        kw["fillvalue"] = np.nan
    ds = f.create_dataset(name, shape=(n0,) + row_shape, maxshape=(None,) + row_shape,
                          dtype=data.dtype, chunks=(chunk_rows,) + row_shape, **kw)
    desc, units = DESCRIPTIONS.get(key, (f"result series {key!r}", "see docs/model.md §10"))
    shape_text, dims = _SHAPES.get(key, _SERIES_SHAPE)
    ds.attrs["description"] = desc
    ds.attrs["units"] = units
    ds.attrs["shape"] = shape_text
    ds.attrs["dims"] = json.dumps(list(dims))
    return ds


def _put(g, name, value):
    """Overwrite dataset ``name`` in place when shape and dtype match, else recreate it."""
    value = np.asarray(value)
    ds = g.get(name)
    if ds is not None and ds.shape == value.shape and ds.dtype == value.dtype:
        ds[...] = value
        return
    if ds is not None:
        del g[name]
    g.create_dataset(name, data=value)


def _write_slot(g, state):
    _put(g, "k", np.int64(state.k))
    _put(g, "X", np.asarray(state.X, dtype=np.float64))
    _put(g, "D", np.asarray(state.D, dtype=np.float64))
    _put(g, "E0", np.asarray(state.E0))
    cum = g.require_group("cum")
    for name, v in state.cum.items():
        _put(cum, name, np.asarray(v))
    pend = g.require_group("pending")
    keys = sorted(state.pending or {})
    for name in keys:
        _put(pend, name, np.asarray(state.pending[name]))
    g.attrs["pending_keys"] = json.dumps(keys)
    memo = g.require_group("memo")
    mkeys = sorted(getattr(state, "memo", None) or {})
    for name in mkeys:
        _put(memo, name, np.asarray(state.memo[name]))
    g.attrs["memo_keys"] = json.dumps(mkeys)
    g.attrs["cum_keys"] = json.dumps(sorted(state.cum))
    text = json.dumps([_jsonable(s) for s in state.rng_states]).encode("utf-8")
    old = g.get("rng_states")
    cap = old.shape[0] if old is not None and old.shape[0] >= len(text) else 2 * len(text) + 64
    buf = np.full(cap, ord(" "), dtype=np.uint8)  # JSON ignores the trailing blanks
    buf[: len(text)] = np.frombuffer(text, dtype=np.uint8)
    _put(g, "rng_states", buf)
    g.attrs["rng_format"] = "UTF-8 JSON list of numpy bit_generator.state dicts, one per path"


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
    """A State from slot ``g`` (raises on any problem)."""
    from .run import State

    if int(g.attrs.get("complete", 0)) != 1:
        raise ValueError("slot not complete")
    k = int(g["k"][()])
    if k != int(g.attrs["k"]):
        raise ValueError("slot k mismatch")
    cum_keys = json.loads(_attr_str(g.attrs["cum_keys"]))
    pending_keys = json.loads(_attr_str(g.attrs["pending_keys"]))
    memo_keys = json.loads(_attr_str(g.attrs.get("memo_keys", "[]")))
    rng = json.loads(bytes(np.asarray(g["rng_states"][...], dtype=np.uint8)).decode("utf-8"))
    state = State(
        k=k,
        X=np.array(g["X"][...]),
        D=np.array(g["D"][...]),
        rng_states=rng,
        cum={name: np.array(g["cum"][name][...]) for name in cum_keys},
        E0=np.array(g["E0"][...]),
        pending={name: np.array(g["pending"][name][...]) for name in pending_keys},
        memo={name: np.array(g["memo"][name][...]) for name in memo_keys},
    )
    return state, int(g.attrs["n_records"]), int(g.attrs["seq"])


def _best_checkpoint(f):
    """(state, n_records, seq, slot) of the newest readable complete slot, or None."""
    best = None
    ck = f.get("checkpoint")
    if ck is None:
        return None
    for s in SLOTS:
        try:
            state, n_rec, seq = _read_slot(ck[s])
        except Exception as exc:  # noqa: BLE001 - an unusable slot is skipped
            log.debug("checkpoint slot %s unusable: %s", s, exc)
            continue
        if best is None or seq > best[2]:
            best = (state, n_rec, seq, s)
    return best


# --------------------------------------------------------------------------------------
# run, resume
# --------------------------------------------------------------------------------------


def _record_keys(f):
    keys = [k for k in ("t", "X", "D") if isinstance(f.get(k), h5py.Dataset)]
    series = f.get("series")
    if series is not None:
        keys += [f"series/{k}" for k in series]
    return keys


def _run_sim(sim, rec, state, progress):
    """Run ``sim`` into recorder ``rec`` from ``state``; mark complete or leave resumable."""
    try:
        sim.run(recorder=rec, state=state, progress=progress)
    except BaseException as exc:
        try:
            rec.close(error=f"{type(exc).__name__}: {exc}")
        except Exception as exc2:  # noqa: BLE001 - keep the original error
            log.warning("could not flush %s after the failure: %s", rec.path, exc2)
        raise
    rec.finalize(elapsed=getattr(sim, "elapsed", None))


def run_to_file(config=None, path=None, overrides=(), overwrite=False, progress=False,
                simulation=None):
    """Run a configuration into an HDF5 result file; returns the path.

    ``path`` defaults to ``output.path``; ``overwrite`` (or ``output.overwrite``) allows
    replacing a complete result. A checkpoint is written at k = 0 and every
    ``output.checkpoint_every`` steps. ``simulation`` may pass an already built
    :class:`~wflow.run.Simulation` (then ``config``/``overrides`` are ignored).
    """
    from .run import Simulation

    sim = simulation if simulation is not None else Simulation(config, overrides)
    cfg = sim.config
    path = Path(path if path is not None else cfg["output"]["path"])
    rec = H5Recorder(path, cfg, overwrite=overwrite or cfg["output"]["overwrite"])
    try:
        state = sim.initial_state()
        rec.checkpoint(state)
    except BaseException as exc:
        rec.close(error=f"{type(exc).__name__}: {exc}")
        raise
    _run_sim(sim, rec, state, progress)
    return path


@dataclass
class ResumeResult:
    """What :func:`resume` did: ``action`` is "noop" (already complete), "resumed" or
    "restarted" (no usable checkpoint: run again from the start, in place)."""

    path: Path
    action: str
    from_step: int
    nsteps: int
    n_records: int


def resume(path, progress=False) -> ResumeResult:
    """Continue a partial result file from its newest complete checkpoint.

    Ends bit-identical to an uninterrupted run. A complete file is left alone
    (``action = "noop"``); a file without a usable checkpoint restarts from scratch.
    """
    from .run import Simulation

    path = Path(path)

    def head(f):
        cfg = _stored_config(f, path)
        n_on_disk = len(f["t"]) if isinstance(f.get("t"), h5py.Dataset) else 0
        return cfg, _attr_str(f.attrs.get("status")), n_on_disk, _attr_str(
            f.attrs.get("wflow_version"))

    cfg, status, n_on_disk, version = _with_file(path, head)
    if status == COMPLETE:
        return ResumeResult(path, "noop", _config.n_steps(cfg), _config.n_steps(cfg), n_on_disk)
    if version != __version__:
        log.warning("%s was written by wflow %s, this is %s: the continuation may differ "
                    "from an uninterrupted run", path, version, __version__)
    sim = Simulation(cfg)
    lock = _Lock(path).acquire(path)
    try:
        with _open_write(path) as f:
            if _attr_str(f.attrs.get("status")) == COMPLETE:  # finished meanwhile
                lock.release()
                return ResumeResult(path, "noop", sim.nsteps, sim.nsteps, len(f["t"]))
            best = _best_checkpoint(f)
            if best is not None:
                state, n_rec, seq, slot = best
                _check_state(path, sim, state, n_rec)
                action = "resumed"
            else:
                state, n_rec, seq, slot = None, 0, _max_seq(f), None
                action = "restarted"
            for name in _record_keys(f):
                ds = f[name]
                if ds.shape[0] < n_rec:
                    raise ConfigError(f"{path}: corrupt file: {name} has {ds.shape[0]} records, "
                                      f"the checkpoint needs {n_rec}")
                ds.resize(n_rec, axis=0)
            if n_rec and "t" not in f:
                raise ConfigError(f"{path}: corrupt file: dataset 't' missing")
            f.attrs["resumes"] = int(f.attrs.get("resumes", 0)) + 1
            f.flush()
    except BaseException:
        lock.release()
        raise
    rec = H5Recorder._attach(path, sim.config, n_records=n_rec, seq=seq, last_slot=slot,
                             lock=lock)
    if state is None:
        log.info("%s: no usable checkpoint, restarting from step 0", path)
        try:
            state = sim.initial_state()
            rec.checkpoint(state)
        except BaseException as exc:
            rec.close(error=f"{type(exc).__name__}: {exc}")
            raise
    else:
        log.info("%s: resuming from step %d of %d (%d records)", path, state.k, sim.nsteps,
                 n_rec)
    from_step = state.k
    _run_sim(sim, rec, state, progress)
    return ResumeResult(path, action, from_step, sim.nsteps, rec.n_records)


def _max_seq(f):
    seqs = [0]
    for s in SLOTS:
        try:
            seqs.append(int(f["checkpoint"][s].attrs["seq"]))
        except Exception:  # noqa: BLE001
            pass
    return max(seqs)


def _check_state(path, sim, state, n_rec):
    P, n, d, H = sim.P, sim.n, sim.d, sim.H
    problems = []
    if state.X.shape != (P, n, d):
        problems.append(f"X shape {state.X.shape} != {(P, n, d)}")
    if state.D.shape != (P, H, d, d):
        problems.append(f"D shape {state.D.shape} != {(P, H, d, d)}")
    if len(state.rng_states) != P:
        problems.append(f"{len(state.rng_states)} random streams for {P} paths")
    if not 0 <= state.k <= sim.nsteps:
        problems.append(f"step {state.k} outside 0..{sim.nsteps}")
    expected = sum(1 for s in sim.record_steps if s < state.k)
    if n_rec != expected:
        problems.append(f"{n_rec} records, expected {expected} before step {state.k}")
    if problems:
        raise ConfigError(f"{path}: checkpoint does not match the configuration: "
                          + "; ".join(problems))


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------


def read(path, tokens=True):
    """Read a result file.

    Returns ``(config, arrays, attrs)``: the validated configuration dict, a dict of
    arrays with the names of :class:`~wflow.run.Result` (``t``, every series, ``X``,
    ``D``) and the root attributes (JSON attributes decoded). With ``tokens=False``
    the snapshots ``X`` and ``D`` are not loaded. A partial file gives the records
    written so far (cut to a common length).
    """
    path = Path(path)

    def load(f):
        arrays = {}
        for name in _record_keys(f):
            key = name.removeprefix("series/")
            if not tokens and key in ("X", "D"):
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


def _root_attrs(f) -> dict:
    out = {}
    for k, v in f.attrs.items():
        v = _attr_str(v)
        if isinstance(v, np.generic):
            v = v.item()
        if k in ("machine", "versions") and isinstance(v, str):
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
        n_records = len(f["t"]) if isinstance(f.get("t"), h5py.Dataset) else 0
        datasets = {name: tuple(f[name].shape) for name in _record_keys(f)}
        return (_stored_config(f, path), _root_attrs(f), n_records, _best_checkpoint(f),
                datasets)

    cfg, attrs, n_records, best, datasets = _with_file(path, look)
    return {
        "path": path,
        "config": cfg,
        "attrs": attrs,
        "status": attrs.get("status"),
        "n_records": n_records,
        "checkpoint_step": None if best is None else best[0].k,
        "nsteps": _config.n_steps(cfg),
        "datasets": datasets,
    }


def to_xarray(path):
    """The result file as an ``xarray.Dataset`` (dims record, path, token, coord, head)."""
    try:
        import xarray as xr
    except ImportError:
        raise ImportError(
            "wflow.io.to_xarray needs xarray, which is not installed: pip install xarray "
            "(or use wflow.io.read, which returns plain numpy arrays)"
        ) from None
    cfg, arrays, attrs = read(path)
    data_vars = {}
    for key, a in arrays.items():
        if key == "t":
            continue
        dims = _SHAPES.get(key, _SERIES_SHAPE)[1]
        desc, units = DESCRIPTIONS.get(key, (f"result series {key!r}", "see docs/model.md §10"))
        data_vars[key] = (dims, a, {"description": desc, "units": units})
    coords = {"record": np.arange(len(arrays.get("t", ()))),
              "path": np.arange(cfg["solver"]["paths"])}
    if "t" in arrays:
        coords["t"] = ("record", arrays["t"], {"description": DESCRIPTIONS["t"][0]})
    ds_attrs = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in attrs.items()}
    ds_attrs["config"] = json.dumps(cfg, sort_keys=True)
    return xr.Dataset(data_vars, coords=coords, attrs=ds_attrs)
