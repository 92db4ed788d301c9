"""A partial result file after a kill [model §6, "Checkpoints"]: the newest checkpoint slot
that reads back with the records it needs (:func:`_resume_point`), what lies past it dropped
(damaged record chunks rebuilt from the records before, a damaged slot reset, a file with no
usable slot rewritten from its header), and the verification of a complete file
(:func:`_verify`). Storage only."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from wflow.storage._h5 import (
    COMPLETE,
    FAILED,
    ROOT_DATASETS,
    SLOTS,
    CorruptFile,
    _attr_str,
    _mark_complete,
    _new_checkpoint_group,
    _slots,
    _write_slot,
)

log = logging.getLogger("wflow.storage._h5")


def _best_checkpoint(f):
    """(state, n_records, seq, slot) of the newest readable complete slot, or None."""
    complete, _ = _slots(f)
    return complete[0] if complete else None


def _read_rows(ds, a, b):
    """Read records ``a:b`` of dataset ``ds`` back in blocks (HDF5 checks the checksums)."""
    row = max(1, int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize)
    step = max(1, VERIFY_BYTES // row)
    for i in range(a, b, step):
        ds[i:min(b, i + step)]


def _records_problem(f, n_rec) -> str | None:
    """Why the first ``n_rec`` records of every record dataset do not read back, or None."""
    if n_rec == 0:
        return None  # nothing of them is needed
    try:
        names = _record_keys(f)
    except Exception as exc:  # noqa: BLE001 - a damaged group
        return f"the record datasets cannot be listed ({_first_line(exc)})"
    for name in names:
        try:
            ds = f[name]
            if ds.shape[0] < n_rec:
                return f"{name} has {ds.shape[0]} records, the checkpoint needs {n_rec}"
            _read_rows(ds, 0, n_rec)
        except Exception as exc:  # noqa: BLE001 - checksum mismatch, bad chunk index, ...
            return f"dataset {name!r}: {_why(exc)}"
    if n_rec and "t" not in f:
        return "dataset 't' missing"
    return None


@dataclass
class ResumePoint:
    """Where a partial result file continues: the newest complete checkpoint slot that reads
    back *and* whose records read back (``checkpoint`` None: no such slot was ever written,
    restart from step 0), the record datasets holding damaged data past ``n_records`` (to be
    rebuilt from their first ``n_records`` records), the slots to invalidate (complete but
    newer than the one taken: their records are gone) and the damaged slots (to be
    recreated empty)."""

    checkpoint: dict | None
    n_records: int
    seq: int
    slot: str | None
    damaged_records: list
    newer_slots: list
    damaged_slots: list
    rewrite: bool = False  # no record needed and their structure damaged: a fresh file


def _resume_point(f, path: Path) -> ResumePoint:
    try:
        return _find_resume_point(f, path)
    except CorruptFile:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged group or link table
        raise CorruptFile(f"{path}: corrupt result file ({_first_line(exc)}); "
                          f"{CORRUPT_HINT}") from None


def _find_resume_point(f, path: Path) -> ResumePoint:
    """The :class:`ResumePoint` of a partial file: a record written past the checkpoint, a
    checkpoint slot, may be damaged (a kill, a failing disk during the write) without harm;
    the checkpoint's own records must read back. Raises :class:`CorruptFile` (one line)
    when the file has complete checkpoints but none with its records intact."""
    complete, damaged_slots = _slots(f)
    problem = None
    for cand in complete:
        problem = _records_problem(f, cand[1])
        if problem is None:
            state, n_rec, seq, slot = cand
            break
        log.info("%s: checkpoint slot %s (seq %d) not used: %s", path, cand[3], cand[2],
                 problem)
    else:
        if complete:
            raise CorruptFile(f"{path}: corrupt result file: {problem}; {CORRUPT_HINT}")
        # no checkpoint was completed: the run restarts from step 0 in a fresh file (a kill
        # while the first records were written may have left any of them damaged)
        return ResumePoint(None, 0, 0, None, [], [], [])
    newer = [c[3] for c in complete if c[2] > seq]
    bad, rewrite = [], False
    try:
        names = _record_keys(f)
    except Exception as exc:  # noqa: BLE001 - only when no record is needed (above)
        log.info("%s: the record datasets cannot be listed (%s): dropped", path, _why(exc))
        names, rewrite = [], True
    for name in names:
        try:
            ds = f[name]
            if ds.shape[0] > n_rec:
                _read_rows(ds, n_rec, ds.shape[0])
        except Exception as exc:  # noqa: BLE001 - damaged past the checkpoint: rebuilt
            log.info("%s: %s damaged past record %d (%s): dropped", path, name, n_rec, _why(exc))
            bad.append(name)
            rewrite = rewrite or n_rec == 0
    return ResumePoint(state, n_rec, seq, slot, bad, newer, damaged_slots, rewrite)


def _rewrite_empty(path: Path, point=None):
    """Replace the file at ``path`` by a new one holding its root attributes, the first
    ``point.n_records`` records of every record dataset (:func:`_copy_records`) and the
    checkpoint of ``point`` (a :class:`ResumePoint`; None, or one without a checkpoint: the
    run restarts from step 0 in empty groups). What lies past the checkpoint (damaged record
    chunks, damaged or newer slots) stays behind: it is never deleted in place, since HDF5
    frees a deleted dataset's chunks through its chunk index, which a kill can leave pointing
    past the end of the file ("addr overflow"). Written under a temporary name and renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.restarting")
    try:
        with h5py.File(path, "r", locking=False) as f, \
                h5py.File(tmp, "w", locking=False) as out:
            for k, v in f.attrs.items():
                out.attrs[k] = v
            out.create_group("series")
            ck = _new_checkpoint_group(out)
            if point is not None and point.checkpoint is not None:
                for name in (_record_keys(f) if point.n_records else ()):
                    _copy_records(f[name], out, name, point.n_records)
                g = ck[point.slot]
                _write_slot(g, point.checkpoint)
                g.attrs.modify("seq", point.seq)
                g.attrs.modify("k", int(point.checkpoint["k"]))
                g.attrs.modify("n_records", point.n_records)
                _mark_complete(g)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _copy_records(ds, out, name, n_rec):
    """Record dataset ``name`` in file ``out``: the first ``n_rec`` records of ``ds``, with its
    chunking, checksums, fill value and attributes."""
    new = out.create_dataset(name, data=np.asarray(ds[:n_rec]),
                             maxshape=(None,) + ds.shape[1:], chunks=ds.chunks,
                             fletcher32=True, fillvalue=ds.fillvalue)
    for k, v in ds.attrs.items():
        new.attrs[k] = v


def _rebuild_records(f, name, n_rec):
    """Replace record dataset ``name`` by a copy of its first ``n_rec`` records (same
    chunking, checksums, fill value, attributes): what lay past them is damaged."""
    ds = f[name]
    data = np.asarray(ds[:n_rec])
    attrs = {k: v for k, v in ds.attrs.items()}
    chunks, fill = ds.chunks, ds.fillvalue
    del f[name]
    new = f.create_dataset(name, data=data, maxshape=(None,) + data.shape[1:], chunks=chunks,
                           fletcher32=True, fillvalue=fill)
    for k, v in attrs.items():
        new.attrs[k] = v


def _reset_slot(f, slot):
    """Recreate checkpoint slot ``slot`` empty (its datasets do not read back)."""
    ck = f["checkpoint"]
    del ck[slot]
    g = ck.create_group(slot)
    g.attrs["complete"] = 0
    g.attrs["seq"] = 0
    g.attrs["k"] = -1
    g.attrs["n_records"] = 0


def _why(exc) -> str:
    return ("its checksum does not match" if "filter returned failure" in str(exc)
            else f"cannot be read ({_first_line(exc)})")


def _record_keys(f):
    keys = [k for k in ROOT_DATASETS if isinstance(f.get(k), h5py.Dataset)]
    series = f.get("series")
    if series is not None:
        keys += [f"series/{k}" for k in series]
    return keys



def _max_seq(f):
    seqs = [0]
    for s in SLOTS:
        try:
            seqs.append(int(f["checkpoint"][s].attrs["seq"]))
        except Exception:  # noqa: BLE001
            pass
    return max(seqs)




#: what to do with a result file that does not read back
CORRUPT_HINT = "nothing to resume: run it again with `wflow run --overwrite`"
VERIFY_BYTES = 2**24  # the data are read back in blocks of about this size


def _verify_as_status(f, path: Path):
    """What must read back for the file's status: a complete (or failed) file reads back
    whole (:func:`_verify`); a partial run needs its :class:`ResumePoint`, returned."""
    if _attr_str(f.attrs.get("status")) in (COMPLETE, FAILED):
        _verify(f, path)
        return None
    return _resume_point(f, path)


def _verify(f, path: Path):
    """Read every dataset of the file back (in blocks), so that HDF5 checks the fletcher32
    checksums and the object headers; a damaged file raises one ConfigError line."""
    names = []
    try:
        f.visit(names.append)
    except Exception as exc:  # noqa: BLE001 - a damaged group or link table
        raise CorruptFile(f"{path}: corrupt result file ({_first_line(exc)}); "
                          f"{CORRUPT_HINT}") from None
    for name in names:
        try:
            obj = f[name]
            if not isinstance(obj, h5py.Dataset):
                continue
            if obj.shape is None or obj.ndim == 0:
                obj[()]
                continue
            row = max(1, int(np.prod(obj.shape[1:], dtype=np.int64)) * obj.dtype.itemsize)
            step = max(1, VERIFY_BYTES // row)
            for i in range(0, obj.shape[0], step):
                obj[i:i + step]
        except Exception as exc:  # noqa: BLE001 - checksum mismatch, bad header, ...
            raise CorruptFile(f"{path}: corrupt result file: dataset {name!r}: {_why(exc)}; "
                              f"{CORRUPT_HINT}") from None


def _first_line(exc) -> str:
    return (str(exc).splitlines() or [""])[0] or type(exc).__name__
