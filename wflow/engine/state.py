r"""The state of a run and its results: :class:`State` (what a checkpoint holds),
:class:`Result` (the series of [model §10] in memory) and :class:`ListRecorder` (the in-memory
recorder; :class:`wflow.storage.io.H5Recorder` has the same methods)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["State", "Result", "ListRecorder"]


@dataclass
class State:
    """Everything needed to continue a run bit-identically (the checkpoint).

    ``cum`` holds the cumulative series (P,) each; ``rng_states`` the weight-noise streams of
    the paths, then (with token noise) their token-noise streams; ``pending`` the ledger pieces of the last
    step, finished at the next pass; ``stepper_info`` the stepper's series of its last step;
    ``step_ledger`` the per-step ledger of the open record interval (record_every, P, 6);
    ``w2_prev`` the last recorded snapshot and its time (for ``w2_step``). The radii r_i
    (P, n) of the residual stream under the pre-, peri- and mix-LN placements [model §1c] are
    the placement stepper's series ``radius`` in ``stepper_info``.
    """

    k: int
    X: np.ndarray  # (P, n, d)
    D: np.ndarray  # (P, H, d, d)
    rng_states: list  # bit-generator states: one per path, then one per path of token noise
    cum: dict  # cumulative sums, (P,) each
    E0: np.ndarray  # (P,) energy at t = 0 (NaN until the first pass at k = 0 sets it)
    pending: dict = field(default_factory=dict)
    stepper_info: dict = field(default_factory=dict)
    step_ledger: np.ndarray | None = None
    w2_prev: tuple | None = None  # (X (P, n, d), t)

    def to_checkpoint(self) -> dict:
        """A plain mapping of arrays for the storage layer (the file layout of
        ``wflow-results/1`` and ``/2``: the stepper, step-ledger and W₂ pieces under ``memo``)."""
        memo = dict(self.stepper_info)
        if self.step_ledger is not None:
            memo["step_ledger"] = self.step_ledger
        if self.w2_prev is not None:
            memo["w2_prev_X"], memo["w2_prev_t"] = self.w2_prev[0], np.array(self.w2_prev[1])
        return {"k": np.int64(self.k), "X": self.X, "D": self.D, "E0": self.E0,
                "cum": self.cum, "pending": self.pending, "memo": memo,
                "rng_states": self.rng_states}

    @classmethod
    def from_checkpoint(cls, c: dict) -> "State":
        memo = dict(c.get("memo", {}))
        led = memo.pop("step_ledger", None)
        w2 = None
        if "w2_prev_X" in memo:
            w2 = (memo.pop("w2_prev_X"), float(memo.pop("w2_prev_t")))
        return cls(k=int(c["k"]), X=c["X"], D=c["D"], rng_states=c["rng_states"], cum=c["cum"],
                   E0=c["E0"], pending=c.get("pending", {}), stepper_info=memo,
                   step_ledger=led, w2_prev=w2)


class Result:
    """The result series of a run [model §10].

    Attributes are arrays: ``t`` (records,), every series (records, P), ``X``
    (records, P, n, d) when stored, ``D`` (records, P, H, d, d) when stored, and
    ``config`` (the validated dict).
    """

    def __init__(self, config, arrays, meta=None):
        self.config = config
        self.arrays = arrays
        self.meta = meta or {}

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def __getitem__(self, name):
        return self.arrays[name]

    def keys(self):
        """The names of every array of the result: ``t``, the series, the snapshots."""
        return self.arrays.keys()

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.arrays))

    def __repr__(self):
        t = self.arrays.get("t")
        return f"Result(records={0 if t is None else len(t)}, series={sorted(self.arrays)})"


class ListRecorder:
    """Collects records in memory (the default); io.H5Recorder has the same methods."""

    def __init__(self):
        self.rows = []

    def record(self, row: dict):
        self.rows.append(row)

    def checkpoint(self, state):  # in-memory runs need no checkpoint
        pass

    def arrays(self):
        if not self.rows:
            return {}
        return {k: np.stack([np.asarray(r[k]) for r in self.rows]) for k in self.rows[0]}
