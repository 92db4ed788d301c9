"""Taking over a partial result file to continue it (``wflow resume``): the newest checkpoint
slot that reads back with its records, what lies past it dropped, the recorder reattached."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wflow.storage._damage import _rebuild_records, _record_keys, _reset_slot, _resume_point, _rewrite_empty
from wflow.storage._h5 import COMPLETE, SLOTS, _attr_str, _open_read, _open_write
from wflow.storage._locks import _Lock, _reserve
from wflow.storage.files import errno_of, write_error
from wflow.storage.io import METADATA_RESERVE, H5Recorder

__all__ = ["Reopened", "reopen"]


@dataclass
class Reopened:
    """A partial file taken over for continuation: its ``recorder`` (holding the lock), the
    newest complete ``checkpoint`` mapping (None: restart from step 0) and ``n_records``."""

    recorder: H5Recorder | None
    checkpoint: dict | None
    n_records: int


def reopen(path, config, check=None, describe=None) -> Reopened:
    """Take over a partial result file to continue it.

    Locks the file; picks the complete checkpoint slot with the highest ``seq`` that reads
    back cleanly and whose records read back (:func:`~wflow.storage._h5._resume_point`);
    ``check(checkpoint, n_records)`` may refuse it (raise); drops what lies past it (every
    record dataset truncated to the checkpoint's ``n_records``, one damaged past them
    rebuilt from them, a newer slot marked incomplete, a damaged slot recreated empty) and
    counts the resume. A file that became complete meanwhile gives ``recorder = None``.
    """
    path = Path(path)
    lock = _Lock(path).acquire(path)
    try:
        _reserve(path, METADATA_RESERVE)
        with _open_read(path) as f:
            first = (None if _attr_str(f.attrs.get("status")) == COMPLETE
                     else _resume_point(f, path))
        if first is not None and (first.checkpoint is None or first.rewrite
                                  or first.damaged_records or first.damaged_slots):
            # a new file of what the checkpoint needs (its header, records and slot): the
            # damage past it is left behind, not deleted in place
            _rewrite_empty(path, first)
        with _open_write(path) as f:
            if _attr_str(f.attrs.get("status")) == COMPLETE:  # finished meanwhile
                lock.release()
                return Reopened(None, None, len(f["t"]))
            point = _resume_point(f, path)
            ckpt, n_rec, seq, slot = point.checkpoint, point.n_records, point.seq, point.slot
            if ckpt is not None and check is not None:
                check(ckpt, n_rec)
            for s in point.newer_slots:  # their records are gone: never resume from them
                f["checkpoint"][s].attrs.modify("complete", 0)
            for s in point.damaged_slots:  # (none after the rewrite above)
                _reset_slot(f, s)
            for name in _record_keys(f):
                if name in point.damaged_records:
                    _rebuild_records(f, name, n_rec)
                else:
                    f[name].resize(n_rec, axis=0)
            # slots without datasets (damaged, or left behind by the rewrite): their next
            # checkpoint creates them
            fresh = [s for s in SLOTS if not len(f["checkpoint"][s])]
            f.attrs["resumes"] = int(f.attrs.get("resumes", 0)) + 1
            f.flush()
    except BaseException as exc:
        lock.release()
        if isinstance(exc, OSError) or (isinstance(exc, RuntimeError)
                                        and errno_of(exc) is not None):
            raise write_error(path, exc) from None
        raise
    rec = H5Recorder._attach(path, config, n_records=n_rec, seq=seq, last_slot=slot, lock=lock,
                             describe=describe, fresh=fresh)
    return Reopened(rec, ckpt, n_rec)
