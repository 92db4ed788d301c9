"""A partial result file damaged past its checkpoint, or in its newest checkpoint slot, resumes
from the newest slot that reads back (with the records it needs) and ends bit-identical to an
uninterrupted run: what lies past that slot is dropped, never a reason to refuse the file."""

from __future__ import annotations

import struct

import h5py
import pytest
from test_io import Interrupted, _fail_after_calls, assert_same_records, tiny

from wflow.engine import driver
from wflow.errors import ConfigError
from wflow.storage import io

#: 300 tokens: an X record of 14 kB, 4 records a chunk, so the records past the checkpoint
#: lie in a chunk of their own; the compiled field (the NumPy twin takes ~20 times longer at
#: n = 300)
BIG = {"model.n": 300, "solver.record_every": 1, "solver.backend": "numba"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return driver.run_to_file(tiny(**BIG), tmp_path_factory.mktemp("ref") / "ref.h5")


def _interrupted(tmp_path, monkeypatch):
    """A run stopped in step 13 (checkpoints at 0, 4, 8, 12): 13 records on disk, the newest
    checkpoint (k = 12) needs 12 of them."""
    p = tmp_path / "r.h5"
    # one evaluation at the start, one a step (the compiled pass evaluates the step's two
    # fields as one pair, outside `evaluate`)
    _fail_after_calls(monkeypatch, 1 + 13, interrupt=True)
    with pytest.raises(Interrupted):
        driver.run_to_file(tiny(**BIG), p)
    monkeypatch.undo()
    with h5py.File(p, "r") as f:
        ckpt, n_rec, _, slot = io._best_checkpoint(f)
        assert (ckpt["k"], n_rec, f["X"].shape[0]) == (12, 12, 13)
        last = f["X"].id.get_chunk_info(f["X"].id.get_num_chunks() - 1)
        assert last.chunk_offset[0] == 12  # the chunk past the checkpoint
    return p, last.byte_offset, slot


def _patch(path, offset, data):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def test_damaged_chunk_index_past_the_checkpoint_is_dropped(tmp_path, monkeypatch, reference):
    """A kill during a record write can leave the chunk index pointing past the end of the
    file ("addr overflow"): the records the checkpoint needs read back, so resume continues
    from it."""
    p, offset, _ = _interrupted(tmp_path, monkeypatch)
    raw = p.read_bytes()
    where = raw.index(struct.pack("<Q", offset))  # the chunk's address in the chunk index
    assert raw.count(struct.pack("<Q", offset)) == 1
    _patch(p, where, struct.pack("<Q", 2**40))
    with h5py.File(p, "r") as f, pytest.raises(OSError, match="addr overflow"):
        f["X"][12]
    assert io.inspect(p)["checkpoint_step"] == 12
    r = driver.resume(p)
    assert (r.action, r.from_step) == ("resumed", 12)
    assert_same_records(p, reference)
    with h5py.File(p, "r") as f:
        io._verify(f, p)  # nothing damaged is left in the file


def test_damaged_record_data_past_the_checkpoint_is_dropped(tmp_path, monkeypatch, reference):
    p, offset, _ = _interrupted(tmp_path, monkeypatch)
    _patch(p, offset + 10, b"\xff" * 64)  # the checksum no longer matches
    assert driver.resume(p).from_step == 12
    assert_same_records(p, reference)


def test_damaged_newest_slot_falls_back_to_the_older(tmp_path, monkeypatch, reference):
    """Damaged bytes in the newest checkpoint slot: the older slot (k = 8) is used, the
    damaged one is recreated, and the run ends bit-identical."""
    p, _, slot = _interrupted(tmp_path, monkeypatch)
    with h5py.File(p, "r") as f:
        offset = f["checkpoint"][slot]["X"].id.get_chunk_info(0).byte_offset
    _patch(p, offset + 10, b"\xff" * 64)
    assert io.inspect(p)["checkpoint_step"] == 8
    r = driver.resume(p)
    assert (r.action, r.from_step) == ("resumed", 8)
    assert_same_records(p, reference)
    with h5py.File(p, "r") as f:
        io._verify(f, p)


def test_newest_checkpoint_with_damaged_records_falls_back(tmp_path, monkeypatch, reference):
    """Records 8..11 damaged: the k = 12 checkpoint needs them, the k = 8 one does not. Resume
    continues from k = 8; stopped again before its next checkpoint, the k = 12 slot (its
    records dropped) is not taken again."""
    p, _, _ = _interrupted(tmp_path, monkeypatch)
    with h5py.File(p, "r") as f:
        offset = f["X"].id.get_chunk_info(2).byte_offset  # records 8..11
    _patch(p, offset + 10, b"\xff" * 64)
    assert io.inspect(p)["checkpoint_step"] == 8
    _fail_after_calls(monkeypatch, 1 + 2, interrupt=True)  # in step 10 (as _interrupted)
    with pytest.raises(Interrupted):
        driver.resume(p)
    monkeypatch.undo()
    assert io.inspect(p)["checkpoint_step"] == 8
    r = driver.resume(p)
    assert (r.action, r.from_step) == ("resumed", 8)
    assert_same_records(p, reference)


def test_records_a_checkpoint_needs_are_required(tmp_path, monkeypatch):
    """Damage in the records before every checkpoint is a corrupt file (one line)."""
    p, _, _ = _interrupted(tmp_path, monkeypatch)
    with h5py.File(p, "r") as f:
        offset = f["X"].id.get_chunk_info(0).byte_offset
    _patch(p, offset + 10, b"\xff" * 64)
    with pytest.raises(ConfigError, match=r"corrupt result file: dataset 'X': its checksum "
                                          r"does not match; nothing to resume"):
        driver.resume(p)
