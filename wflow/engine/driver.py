r"""Runs into result files: create, checkpoint, finish, resume (the run loop + storage).

:func:`run_to_file` drives a :class:`~wflow.engine.run.Simulation` and hands its records and
checkpoints to the storage layer (:mod:`wflow.storage.io`), which knows nothing of the model;
:func:`resume` continues a partial file from its newest complete checkpoint and ends
bit-identical to an uninterrupted run (the protocol is described in :mod:`wflow.storage.io`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow._version import __version__
from wflow.engine import adaptive_run
from wflow.engine import series as _series
from wflow.engine.run import Simulation, State
from wflow.errors import ConfigError, NumericalError, RunFailedError, WriteError
from wflow.storage import io, resuming

log = logging.getLogger(__name__)

__all__ = ["run_to_file", "resume", "ResumeResult", "header", "failed_message", "result_hash",
           "check_reuse", "input_files", "stored_digests"]


def result_hash(cfg, format_version=io.FORMAT_VERSION, wflow_version=__version__,
                digests=None) -> str:
    """The computation hash of a result (:func:`wflow.config.config_hash`): the configuration's
    computation, the results format and the wflow version whose numbers the file promises.
    Output location, checkpoint spacing, progress and a sweep's batch size are not part of it.
    ``digests``: those of the input files a stored run read (:func:`stored_digests`)."""
    return _config.config_hash(cfg, {"format": int(format_version), "wflow": str(wflow_version)},
                               digests)


def input_files(cfg) -> dict:
    """The input files ``cfg`` names (:data:`wflow.config.INPUT_FILE_KEYS`): dotted key ->
    ``{"path": absolute path, "sha256": "sha256:<hex>"}``, stored with a result (root
    attribute ``inputs``) so that its hash and its resume refer to what the run read."""
    out = {}
    for key in _config.INPUT_FILE_KEYS:
        sec, k = key.split(".")
        name = cfg.get(sec, {}).get(k)
        if name:
            out[key] = {"path": os.path.abspath(name), "sha256": _config._file_digest(name)}
    return out


def stored_digests(head) -> dict | None:
    """The input-file digests of a stored result (``read_header``'s ``inputs``), or None for
    a file written before they were stored (then they are computed from today's files)."""
    inputs = head.get("inputs")
    if inputs is None:
        return None
    return {key: entry["sha256"] for key, entry in inputs.items()}


def header(sim: Simulation, inputs=None) -> dict:
    """Root attributes a result file carries besides the configuration; ``inputs`` (default:
    read now, :func:`input_files`) the input files the run read."""
    cfg = sim.config
    inputs = input_files(cfg) if inputs is None else inputs
    digests = {key: entry["sha256"] for key, entry in inputs.items()}
    return {"config_hash": result_hash(cfg, digests=digests), "seed": int(cfg["init"]["seed"]),
            "nsteps": sim.nsteps, "n_records_expected": len(sim.record_steps),
            "inputs": json.dumps(inputs, sort_keys=True)}


def check_reuse(path, cfg, what="result") -> None:
    """Raise :class:`ConfigError` unless the result file ``path`` holds the computation that
    ``cfg`` asks for: its hash is recomputed from the stored configuration, versions and the
    digests of the input files the run read (stored when it ran; so files of any wflow
    version are judged by the same rule, and an input file changed since is seen) and
    compared with ``cfg``'s. The message names the differing keys and the way out
    (``--overwrite``, or another ``-o``)."""
    path = Path(path)
    try:
        head = io.read_header(path)
        stored = _config.validate(head["config"], explicit=())
    except ConfigError as exc:
        raise ConfigError(f"{path}: cannot be reused ({exc}); rerun with --overwrite or "
                          f"another -o") from None
    mine = result_hash(cfg)
    digests = stored_digests(head)
    theirs = result_hash(stored, head["format_version"], head["wflow_version"], digests)
    if mine == theirs:
        return
    diffs = []
    for key in _config.differing_keys(stored, cfg):
        sec, k = key.split(".")
        old, new = stored.get(sec, {}).get(k), cfg.get(sec, {}).get(k)
        diffs.append(f"{key} = {old!r} there, {new!r} here" if old != new
                     else f"the file {key} = {new!r} changed")
    now = {key: entry["sha256"] for key, entry in input_files(cfg).items()}
    for key, digest in (digests or {}).items():
        sec, k = key.split(".")
        if now.get(key) not in (None, digest) and stored[sec][k] == cfg.get(sec, {}).get(k):
            diffs.append(f"the file {key} = {stored[sec][k]!r} changed since the result "
                         f"was computed")
    if head["wflow_version"] != __version__:
        diffs.append(f"written by wflow {head['wflow_version'] or '?'}, this is {__version__}")
    if head["format_version"] != io.FORMAT_VERSION:
        diffs.append(f"results format {head['format_version']}, this is {io.FORMAT_VERSION}")
    raise ConfigError(f"{path}: holds another computation than this {what} asks for "
                      f"({'; '.join(diffs) or 'an input file changed'}); rerun with --overwrite "
                      f"to replace it, or give another -o")


def _as_read(path, cfg, inputs):
    """``cfg`` with its input files at the absolute paths the run read them from, each
    checked against the digest stored then; ConfigError (one line) when one is missing or
    changed: the continuation would not be the run that started."""
    if inputs is None:
        return cfg
    cfg = {sec: dict(v) if isinstance(v, dict) else v for sec, v in cfg.items()}
    for key, entry in inputs.items():
        sec, k = key.split(".")
        if not cfg.get(sec, {}).get(k):
            continue
        where = entry["path"]
        if not os.path.isfile(where):
            why = "which is missing"
        elif _config._file_digest(where) != entry["sha256"]:
            why = "which has changed since"
        else:
            cfg[sec][k] = where
            continue
        raise ConfigError(f"{path}: cannot resume: the run read {key} = {where!r}, {why}; "
                          f"restore that file, or run again with --overwrite")
    return cfg


def _run_sim(sim, rec, state, progress):
    """Run ``sim`` into recorder ``rec`` from ``state``; mark complete, failed (a numerical
    failure: running again would fail again) or leave resumable (any other interruption)."""
    try:
        sim.run(recorder=rec, state=state, progress=progress)
    except BaseException as exc:
        step, error = None, f"{type(exc).__name__}: {exc}"
        if isinstance(exc, NumericalError):
            step = exc.step if exc.step is not None else -1
            error = str(exc).split(";")[0]  # "non-finite energy at step 7 (t = 0.07)"
        if isinstance(exc, WriteError):  # the disk refused: write nothing more
            rec.abandon()
            raise
        try:
            rec.close(error=error, failed_step=step)
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
    :class:`~wflow.engine.run.Simulation` (then ``config``/``overrides`` are ignored).
    """
    sim = simulation if simulation is not None else Simulation(config, overrides)
    cfg = sim.config
    path = Path(path if path is not None else cfg["output"]["path"])
    rec = io.create(path, cfg, overwrite=overwrite or cfg["output"]["overwrite"],
                    header=header(sim), describe=_series.describe_full)
    _run_sim(sim, rec, _first_checkpoint(sim, rec), progress)
    return path


def _first_checkpoint(sim, rec) -> State:
    """The initial state, checkpointed at k = 0 (a failure leaves the file resumable)."""
    try:
        state = sim.initial_state()
        rec.checkpoint(state)
    except BaseException as exc:
        if isinstance(exc, WriteError):  # the disk refused: write nothing more
            rec.abandon()
        else:
            rec.close(error=f"{type(exc).__name__}: {exc}")
        raise
    return state


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

    Ends bit-identical to an uninterrupted run: the input files are read from the absolute
    paths the run started with, whatever the current folder, and must hold what they held
    then (their stored sha256), else ConfigError. A complete file is left alone
    (``action = "noop"``); a file without a usable checkpoint restarts from scratch.
    """
    path = Path(path)
    head = io.read_header(path)
    try:
        # a stored configuration is complete: no key of it counts as set explicitly
        cfg = _config.validate(head["config"], explicit=())
    except ConfigError as exc:
        raise ConfigError(f"{path}: stored configuration is invalid: {exc}") from None
    if head["status"] not in (io.COMPLETE, io.FAILED):
        cfg = _as_read(path, cfg, head["inputs"])
    if head["status"] == io.COMPLETE:
        n = _config.n_steps(cfg)
        return ResumeResult(path, "noop", n, n, head["n_records"])
    if head["status"] == io.FAILED:
        raise RunFailedError(failed_message(path, head["failed_step"], head["error"]))
    if head["wflow_version"] != __version__:
        log.warning("%s was written by wflow %s, this is %s: the continuation may differ "
                    "from an uninterrupted run", path, head["wflow_version"], __version__)
    sim = Simulation(cfg, explicit=())
    again = resuming.reopen(path, sim.config,
                      check=lambda c, n_rec: _check_state(path, sim, State.from_checkpoint(c),
                                                          n_rec),
                      describe=_series.describe_full)
    if again.recorder is None:  # finished meanwhile
        return ResumeResult(path, "noop", sim.nsteps, sim.nsteps, again.n_records)
    rec = again.recorder
    if again.checkpoint is None:
        log.info("%s: no usable checkpoint, restarting from step 0", path)
        action = "restarted"
        state = _first_checkpoint(sim, rec)
    else:
        action = "resumed"
        state = State.from_checkpoint(again.checkpoint)
        log.info("%s: resuming from step %d of %d (%d records)", path, state.k, sim.nsteps,
                 again.n_records)
    from_step = state.k
    _run_sim(sim, rec, state, progress)
    return ResumeResult(path, action, from_step, sim.nsteps, rec.n_records)


def failed_message(path, step, error) -> str:
    """One line for a result file whose run failed numerically."""
    where = f" at step {step}" if step is not None and step >= 0 else ""
    why = f": {error}" if error else ""
    return (f"{path}: the run failed{where}{why}; nothing to resume (change the configuration "
            f"and run again with --overwrite)")


def _check_state(path, sim, state, n_rec):
    P, d, H = sim.P, sim.d, sim.H
    problems = []
    want = sim.X0.shape  # (P, n, d) tokens, or (P, N) cell averages of a density
    if state.X.shape != want:
        problems.append(f"X shape {state.X.shape} != {want}")
    if state.D.shape != (P, H, d, d):
        problems.append(f"D shape {state.D.shape} != {(P, H, d, d)}")
    if len(state.rng_states) != sim.n_streams:
        problems.append(f"{len(state.rng_states)} random streams for {P} paths "
                        f"(expected {sim.n_streams})")
    if sim.adaptive:  # k counts rounds; the records are written at the end [model §6d]
        loop = adaptive_run.loop_state(state)
        if state.k < 0 or (loop is None) != (state.k == 0):
            problems.append(f"round {state.k} without the adaptive loop state"
                            if loop is None else "an adaptive loop state at round 0")
        elif loop is not None and np.shape(loop["Xr"])[1:] != want:
            problems.append(f"records of shape {np.shape(loop['Xr'])[1:]} != {want}")
    elif not 0 <= state.k <= sim.nsteps:
        problems.append(f"step {state.k} outside 0..{sim.nsteps}")
    expected = 0 if sim.adaptive else sum(1 for s in sim.record_steps if s < state.k)
    if n_rec != expected:
        problems.append(f"{n_rec} records, expected {expected} before step {state.k}")
    if problems:
        raise ConfigError(f"{path}: checkpoint does not match the configuration: "
                          + "; ".join(problems))
