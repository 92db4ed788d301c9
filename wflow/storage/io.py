r"""HDF5 result files: writing, checkpoints, resume, reading (format ``wflow-results/2``;
``wflow-results/1`` files, which lack ``format_version``, ``failed_step``, ``git`` and the
checksums, read the same way).

Layout of a result file::

    /                     attrs: format, format_version, wflow_version,
    |                            status ("running" | "complete" | "failed"),
    |                            config (JSON), config_hash, seed, nsteps, n_records_expected,
    |                            created, finished (ISO UTC), machine (JSON), versions (JSON),
    |                            git (JSON {commit, dirty}; only when run from a git checkout),
    |                            resumes, error (last failure, if any), failed_step (the step
    |                            of a numerical failure: status "failed"), inputs (JSON: the
    |                            input files the run read, key -> {path (absolute), sha256})
    ├── t                 (records,)                 float64, model time of each record
    ├── series/<name>     (records, P)               one dataset per result series [model §10]
    ├── X                 (records, P, n, d)         token snapshots (output.store_tokens)
    ├── rho               (records, P, N)            instead of X in a density run: cell averages
    ├── D                 (records, P, H, d, d)      weights (output.store_weights)
    └── checkpoint/       two ping-pong slots, never deleted, overwritten in place
        ├── a/            attrs: complete (0|1), seq, k, n_records, written
        │   ├── k, n_records              scalars
        │   ├── X (P, n, d) (a density run: ρ (P, N)), D (P, H, d, d), E0 (P,)
        │   ├── cum/<name> (P,)           cumulative sums
        │   ├── pending/<name> (P,)       ledger pieces of the last step (attr pending_keys)
        │   └── rng_states                uint8: UTF-8 JSON list of bit_generator.state dicts
        └── b/            same

Every record dataset is chunked, resizable along the record axis and checksummed (HDF5's
fletcher32 filter, as are the checkpoint arrays); :func:`read_header` and :func:`inspect` read
every dataset of a complete file back, so a damaged file is one clear error rather than
"already complete"; of a partial file, what its resume needs (step 3).

Checkpoint protocol (a SIGKILL at any moment leaves a usable checkpoint):

1. buffered records are written and the file flushed, so that the checkpoint never
   refers to records that are not on disk;
2. the slot *not* holding the newest complete checkpoint is marked ``complete = 0``,
   flushed; then its data are overwritten in place and flushed; then ``seq``,
   ``k``, ``n_records`` are set and ``complete = 1`` is written last and flushed.
   The other slot is never touched meanwhile, so the newest complete one survives.
3. :func:`resume` takes the complete slot with the highest ``seq`` that reads back
   cleanly and whose ``n_records`` records read back, drops what lies past it (a kill
   during a record write can leave a chunk past the checkpoint unreadable: that dataset is
   rebuilt from the records before; a newer slot is marked incomplete, a damaged one
   recreated empty), truncates every record dataset to its ``n_records``, restores the
   :class:`~wflow.engine.run.State` and continues, appending; ``status = "complete"`` is
   set only at the very end, after every record is on disk.

A full disk (or a disk quota) never leaves a file that does not read back: before each write
the space it can take (the chunks its records start, a checkpoint slot's arrays when the slot
is new, a margin for HDF5's own structures) is allocated past the end of the file with
``posix_fallocate`` (:func:`~wflow.storage._locks._reserve`), and HDF5 writes into it, trimming
the rest when the file closes. A refused allocation raises before HDF5 touches the file, so
the file stays as its last flush left it: resumable from its newest complete checkpoint once
space is freed. This was chosen over a checkpoint in a sidecar file (written to a temporary
name and renamed) because the checkpoint is not what breaks: HDF5 is not transactional, and a
write the disk refuses halfway (the records as much as a checkpoint) leaves the metadata of
the whole file inconsistent; a sidecar checkpoint would point into records that no longer
read. Allocating every dataset at its final size when the file is created would also work,
but changes the format (records on disk would no longer be the datasets' length) and costs
the whole file's space up front. The write errors become one line naming the file
(:func:`wflow.storage.files.write_error`).

The file is opened for the duration of each write (records, checkpoint, finish)
only, so other processes can read it during a run; exclusive access among writers
is an advisory lock on a sidecar ``<file>.lock`` (POSIX ``flock``, released by the
kernel if the writer dies).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

import h5py
import numpy as np

from wflow._version import __version__
from wflow.errors import ConfigError, WflowError
from wflow.storage._damage import (  # noqa: F401  (_best_checkpoint: used by tests)
    _best_checkpoint,
    _max_seq,
    _rebuild_records,
    _record_keys,
    _reset_slot,
    _resume_point,
    _rewrite_empty,
    _verify,
)
from wflow.storage._h5 import (  # noqa: F401  (_mark_complete: used by tests)
    CHUNK_BYTES,
    COMPLETE,
    FAILED,
    FORMAT,
    FORMAT_VERSION,
    READABLE_FORMATS,
    RUNNING,
    SLOTS,
    _append_records,
    _attr_str,
    _check_format,
    _config_json,
    _create_record_dataset,
    _dataset_name,
    _generic_description,
    _git,
    _jsonable,
    _looks_hdf5,
    _machine,
    _mark_complete,
    _new_checkpoint_group,
    _now,
    _open_read,
    _open_write,
    _set_time,
    _stored_config,
    _versions,
    _with_file,
    _write_slot,
)
from wflow.storage._locks import (  # noqa: F401  (lock_holder, lock_folder: public here)
    _Lock,
    _reserve,
    lock_folder,
    lock_holder,
)
from wflow.storage.files import errno_of, write_error

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "H5Recorder",
    "create",
    "read_header",
    "read_arrays",
    "read",
    "to_xarray",
    "inspect",
    "file_status",
    "merge_paths",
    "lock_folder",
]

#: records kept in memory between writes (at most; fewer for large snapshots)
BUFFER_RECORDS = 64
BUFFER_BYTES = 16 * 2**20
#: disk reserved for HDF5's own structures at each write (object headers, chunk indexes)
METADATA_RESERVE = 2**16
#: and per record dataset written (its chunk index, its object header when it is created)
DATASET_RESERVE = 2**13


def _checkpoint_bytes(ckpt, fresh: bool) -> int:
    """Disk a checkpoint can take: in a ``fresh`` slot (its datasets created now) its arrays
    and a page per array (chunks round up), twice the random streams' JSON (the buffer keeps
    room to grow); in a used slot, overwritten in place, the streams only (their buffer may
    grow) and a page per array (a dataset whose shape changed is recreated)."""
    arrays, text = [], 0
    for v in ckpt.values():
        if isinstance(v, dict):
            arrays += [np.asarray(a).nbytes for a in v.values()]
        elif isinstance(v, (list, tuple)):  # the random streams, as JSON
            text += len(json.dumps([_jsonable(x) for x in v]))
        else:
            arrays.append(np.asarray(v).nbytes)
    return (sum(arrays) if fresh else 0) + 4096 * len(arrays) + 2 * text + 64


# --------------------------------------------------------------------------------------
# the recorder
# --------------------------------------------------------------------------------------


class H5Recorder:
    """Records a run into an HDF5 file (the recorder protocol of :meth:`Simulation.run`).

    Parameters
    ----------
    path : output file.
    config : the (validated) configuration dict, stored as JSON.
    overwrite : replace a complete result, a failed run, a damaged partial run (one that
        does not read back: nothing to resume) or a non-wflow file at ``path``. A partial run
        that reads back is never replaced: it can only be continued with ``wflow resume``.
    header : further root attributes (``config_hash``, ``seed``, ``nsteps``,
        ``n_records_expected``, …), written with the file.
    describe : callable name -> (description, units, dims) for the attributes of each
        record dataset (the run layer passes its series table); generic when None.

    Methods ``record(row)``, ``checkpoint(state)``, ``finalize()`` (flush and mark the
    file complete) and ``close()`` (flush, leave it resumable).
    """

    def __init__(self, path, config, overwrite=False, header=None, describe=None):
        self.path = Path(path)
        self.config = config
        self.header = dict(header or {})
        self.describe = describe or _generic_description
        self._fresh = set()  # slots whose datasets are (re)created by their next checkpoint
        self._init_state(n_records=0, seq=0, last_slot=None)
        parent = self.path.parent
        try:  # the rule of every command: missing directories are created
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot create the directory {str(parent)!r} "
                              f"({exc.strerror or type(exc).__name__})") from None
        self._lock = _Lock(self.path).acquire(self.path)
        try:
            self._create(bool(overwrite))
        except BaseException:
            self._lock.release()
            raise

    @classmethod
    def _attach(cls, path, config, n_records, seq, last_slot, lock, describe=None, fresh=()):
        self = cls.__new__(cls)
        self._fresh = set(fresh)
        self.path = Path(path)
        self.config = config
        self.describe = describe or _generic_description
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
            damage = _damage(path)  # (this process holds the lock: no other writer)
            if damage is None:
                raise FileExistsError(
                    f"{path} is a partial run: use `wflow resume {path}` (or delete it)"
                )
            if not overwrite:
                raise FileExistsError(damage)
            log.info("replacing the damaged partial run %s", path)
        if status == FAILED and not overwrite:
            raise FileExistsError(
                f"{path} holds a run that failed: use --overwrite to replace it"
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
        except BaseException as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            if isinstance(exc, OSError) or (isinstance(exc, RuntimeError)
                                            and errno_of(exc) is not None):
                raise write_error(path, exc) from None
            raise
        log.info("created %s", path)

    def _write_header(self, tmp: Path):
        cfg = self.config
        with h5py.File(tmp, "w", locking=False) as f:
            a = f.attrs
            a["format"] = FORMAT
            a["format_version"] = FORMAT_VERSION
            a["status"] = RUNNING
            a["wflow_version"] = __version__
            a["config"] = _config_json(cfg)
            # uniform or geometric record times [model §6d]
            a["record_times"] = str(cfg.get("solver", {}).get("record_times", "uniform"))
            for key, value in self.header.items():
                a[key] = value
            a["created"] = _now()
            a["machine"] = json.dumps(_machine())
            a["versions"] = json.dumps(_versions())
            git = _git()
            if git:
                a["git"] = json.dumps(git)
            a["resumes"] = 0
            f.create_group("series")
            _new_checkpoint_group(f)

    # ------------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _writing(self, reserve: int = 0):
        """The file opened for writing, with the space of the buffered records and
        ``reserve`` more bytes allocated first (:func:`~wflow.storage._locks._reserve`); an OS
        or HDF5 write error becomes one line naming the file
        (:func:`wflow.storage.files.write_error`)."""
        try:
            _reserve(self.path, self._buffer_bytes() + reserve + METADATA_RESERVE)
            f = _open_write(self.path)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        try:
            yield f
        except BaseException as exc:
            # the first error is the one to report: closing after a failed HDF5 write often
            # fails too, with an error that names neither the cause nor the file
            with contextlib.suppress(Exception):
                f.close()
            if isinstance(exc, OSError) or (isinstance(exc, RuntimeError)
                                            and errno_of(exc) is not None):
                raise write_error(self.path, exc) from None
            raise
        try:
            f.close()
        except (OSError, RuntimeError) as exc:
            raise write_error(self.path, exc) from None

    def _buffer_bytes(self) -> int:
        """Disk the buffered records can take: the chunks they start (a chunk of ``c``
        records is allocated whole when its first record is written; the chunk the file's
        last record is in exists already) and, per dataset that starts a chunk, a few pages
        of chunk index and object header."""
        if not self._buffer:
            return 0
        n0, b = self.n_records, len(self._buffer)
        total = 0
        for v in self._buffer[0].values():
            row = max(1, np.asarray(v).nbytes)
            c = max(1, min(256, CHUNK_BYTES // row))
            new = -(-(n0 + b) // c) - -(-n0 // c)  # chunks from ceil(n0 / c) on
            if new:
                total += new * c * row + DATASET_RESERVE
        return total

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
        with self._writing() as f:
            self._write_records(f)

    def _write_records(self, f):
        rows = self._buffer
        if not rows:
            return
        n0, b = self.n_records, len(rows)
        present = set(_record_keys(f))  # one listing, not a lookup per missing series
        for key in rows[0]:
            data = np.stack([r[key] for r in rows])
            name = _dataset_name(key)
            if name not in present:  # created at its full size, written once
                _create_record_dataset(f, name, key, data, n0, self.describe)
                continue
            held = _append_records(f, name, data, n0)
            if held is not None:
                raise WflowError(
                    f"{self.path}: record {key!r} has shape {data.shape[1:]}, "
                    f"the file holds {held}"
                )
        f.flush()
        self.n_records = n0 + b
        self._buffer = []

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, state):
        """Write a checkpoint into the free slot (see module doc): a mapping of arrays, or
        an object with ``to_checkpoint()`` returning one."""
        if self._closed:
            raise WflowError(f"{self.path}: recorder is closed")
        slot = SLOTS[1] if self._last_slot == SLOTS[0] else SLOTS[0]
        seq = self._seq + 1
        ckpt = state.to_checkpoint() if hasattr(state, "to_checkpoint") else state
        # both slots hold datasets once two checkpoints were written (seq counts them)
        fresh = seq <= len(SLOTS) or slot in self._fresh
        with self._writing(_checkpoint_bytes(ckpt, fresh=fresh)) as f:
            self._write_records(f)  # 1. records first: the checkpoint refers to them
            g = f["checkpoint"][slot]
            g.attrs.modify("complete", 0)  # 2. invalidate the slot before touching it
            f.flush()
            _write_slot(g, ckpt)
            g.attrs.modify("seq", seq)
            g.attrs.modify("k", int(ckpt["k"]))
            g.attrs.modify("n_records", self.n_records)
            _set_time(g, "written", _now())
            f.flush()
            _mark_complete(g)  # 3. the completeness mark goes last
            f.flush()
        self._seq, self._last_slot = seq, slot
        self._fresh.discard(slot)
        log.debug("checkpoint k=%d (slot %s, seq %d, %d records)", int(ckpt["k"]), slot, seq,
                  self.n_records)

    # ------------------------------------------------------------------ end
    def finalize(self, elapsed=None):
        """Write the remaining records, then (last) mark the file complete."""
        if self._closed:
            return
        try:
            with self._writing() as f:
                self._write_records(f)
                if "error" in f.attrs:
                    del f.attrs["error"]
                f.attrs["finished"] = _now()
                if elapsed is not None:
                    f.attrs["elapsed_last_invocation"] = float(elapsed)
                f.flush()
                f.attrs["status"] = COMPLETE
                f.flush()
        finally:
            self._release()
        log.info("%s complete (%d records)", self.path, self.n_records)

    def close(self, error=None, failed_step=None):
        """Write the buffered records and release the file; it stays resumable (status
        ``running``), unless ``failed_step`` is given: then the run failed for good at that
        step (status ``failed``, attributes ``error`` and ``failed_step``)."""
        if self._closed:
            return
        try:
            with self._writing() as f:
                self._write_records(f)
                if error is not None:
                    f.attrs["error"] = str(error).replace("\n", " ")[:1000]
                if failed_step is not None:
                    f.attrs["failed_step"] = int(failed_step)
                    f.flush()
                    f.attrs["status"] = FAILED
                f.flush()
        finally:
            self._release()

    def abandon(self):
        """Release the file without writing anything more (after a failed write: the file
        stays as its last flush left it, resumable from its newest complete checkpoint)."""
        if not self._closed:
            self._buffer = []
            self._release()

    def _release(self):
        self._closed = True
        self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(error=exc[1] if exc[1] is not None else None)
        return False


# --------------------------------------------------------------------------------------
# run, resume
# --------------------------------------------------------------------------------------


def create(path, config, overwrite=False, header=None, describe=None) -> H5Recorder:
    """A new result file at ``path`` (see :class:`H5Recorder`)."""
    return H5Recorder(path, config, overwrite=overwrite, header=header, describe=describe)


# reading (input arrays, result files, merging batches, xarray) lives in storage.reading
from wflow.storage.reading import (  # noqa: E402,F401
    ARRAY_SUFFIXES,
    _damage,
    file_status,
    inspect,
    merge_paths,
    read,
    read_arrays,
    read_header,
    to_xarray,
)
