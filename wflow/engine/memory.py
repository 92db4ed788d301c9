r"""How much memory a run needs, estimated from its configuration, and how much there is.

:func:`estimate` adds up the arrays a run holds at its peak (bytes, float64 throughout):

* ``state``: the tokens X (P, n, d) in their copies (initial, current, field outputs, the
  integrator's stages, as its stepper declares them:
  :func:`~wflow.stepping.registry.stepper_stages`) and the weights D (P, H, d, d) with theirs;
* ``kernel``: the field evaluation — the compiled kernels' buffers (P·H·n·(d + 4) plus
  per-token rows), the NumPy backend's dense (H, n, n) arrays (one path at a time), or the
  spectral summation's per-path arrays [model §2s] (:func:`spectral_kernel`);
* ``records``: every record when they are kept in memory (:func:`wflow.simulate`), or the
  records buffered before each HDF5 write (:func:`wflow.engine.driver.run_to_file`);
* ``checkpoint``: the copies written into a checkpoint slot (runs into a file);
* ``diagnostics``: the (m, m) matrices of W₂ and the (P, m, d) copies of the clustering
  diagnostics (their pairwise statistics take one pass and no Gram matrix),
  m = min(n, diagnostics.max_pairwise_n) (computed at a record, after the field's buffers are
  freed: the peak counts the larger of ``kernel`` and ``diagnostics``).

The coefficients were measured with :mod:`tracemalloc` (``tests/test_memory.py`` keeps the
estimate within 30 % of the measured peak). :func:`check` refuses a configuration whose estimate
exceeds :func:`available` (the cgroup limit where there is one, else ``MemAvailable``).

:func:`output_bytes` estimates the size of the result file (HDF5, uncompressed: every record
dataset in whole chunks, the two checkpoint slots, the metadata); :func:`check_disk` refuses
an output whose estimate exceeds the free space where it goes (:func:`disk_free`: the file
system of the nearest existing parent directory).
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from wflow.errors import ConfigError
from wflow.stepping.registry import stepper_stages

__all__ = ["Estimate", "estimate", "available", "check", "human", "output_bytes", "disk_free",
           "check_disk", "spectral_kernel", "spectral_degree"]

F8 = 8
#: records buffered by the HDF5 recorder between writes (mirrors wflow.storage.io)
BUFFER_RECORDS, BUFFER_BYTES = 64, 16 * 2**20

#: what a run adds to its process besides its arrays: the compiled kernels loaded from the
#: cache, the HDF5 library's buffers, the imports of the diagnostics, thread stacks (measured
#: 69–76 MB on x86-64 Linux with either backend, from n = 200 to 2000; rounded up)
RUNTIME_BYTES = 96 * 2**20
#: where the process's resident memory is read (Linux); elsewhere the peak so far
PROC_STATUS = Path("/proc/self/status")

CGROUP_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_CURRENT = Path("/sys/fs/cgroup/memory.current")
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Estimate:
    """Bytes by part (``parts``), ``records`` the number of records and the peak ``total``:
    the kernel's buffers (during a field evaluation) and the diagnostics' matrices (at a
    record) are never alive together, so the larger of the two counts. ``process`` is the
    resident memory of the process when the estimate was made (Python, NumPy, numba, the
    libraries: measured, not modelled) and ``runtime`` what a run adds besides its arrays
    (:data:`RUNTIME_BYTES`): ``total`` is the peak resident memory to expect, ``added``
    what the run will still allocate (what must fit into the memory available)."""

    parts: dict
    records: int

    @property
    def arrays(self) -> int:
        """The run's own arrays at their peak (what ``tracemalloc`` sees)."""
        p = self.parts
        return int(p["state"] + p["records"] + p["checkpoint"]
                   + max(p["kernel"], p["diagnostics"]))

    @property
    def added(self) -> int:
        return int(self.parts.get("runtime", 0) + self.arrays)

    @property
    def total(self) -> int:
        return int(self.parts.get("process", 0) + self.added)

    def breakdown(self, process=True) -> str:
        return ", ".join(f"{k} {human(v)}" for k, v in self.parts.items()
                         if v and (process or k != "process"))

    def __str__(self) -> str:
        return f"{human(self.total)} ({self.breakdown()})"


def human(nbytes) -> str:
    """``1.5 GB`` style (powers of 1024)."""
    x = float(nbytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(x) < 1024 or unit == "TB":
            if unit == "B":
                return f"{x:.0f} {unit}"
            return f"{x:.1f} {unit}" if abs(x) < 1e5 else f"{x:.3g} {unit}"
        x /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def n_records(cfg) -> int:
    """Records of a run: t = 0 and every ``record_every`` steps and T, or under geometric
    record times t = 0 and ``solver.records`` times (an upper bound for the fixed steppers,
    which drop the duplicates of the rounding to the step grid)."""
    s = cfg["solver"]
    if s.get("record_times") == "geometric":
        return int(s["records"]) + 1
    nsteps = int(round(s["T"] / s["dt"]))
    every = int(s["record_every"])
    return nsteps // every + 1 + (1 if nsteps % every else 0)


def _shape(cfg) -> tuple[int, int, bool]:
    """(points the kernel sees, floats of one path's snapshot, density run) of ``cfg``: the
    n tokens and their n·d coordinates, or for ``solver.representation = "density"`` the N =
    ``density.cells`` cell centres (weighted points) and the N cell averages ρ_k."""
    m = cfg["model"]
    if cfg["solver"].get("representation", "particles") == "density":
        dn = cfg["density"]
        N = int(dn["cells"])
        if dn.get("representation", "fv") == "spectral":  # the nodes of the grid [model §5b]
            from wflow.geometry.harmonics import harmonics

            N = harmonics(int(m["d"]), int(dn["degree"])).N
        return N, N, True
    n = int(m["n"])
    return n, n * int(m["d"]), False


def estimate(cfg, keep_records=False) -> Estimate:
    """Peak bytes of a run of the validated configuration ``cfg``; ``keep_records``: every
    record stays in memory (:func:`wflow.simulate`) instead of going to a file. A density run
    [model §5b] counts its N cells as the kernel's points, ρ (P, N) as the state and the
    snapshots, and the mesh."""
    m, s, dg, out = cfg["model"], cfg["solver"], cfg["diagnostics"], cfg["output"]
    d, H, P = int(m["d"]), int(m["heads"]), int(s["paths"])
    n, snap, density = _shape(cfg)
    method = s["method"]
    stages = stepper_stages(method)  # as the stepper declares them (its tableau's stages)
    nd, Hdd, Hn = P * n * d, P * H * d * d, P * H * n
    ledger = bool(dg["ledger"]) and m["mask"] != "causal"

    # tokens: initial, current, next; per field evaluation velocity, gradient, 5 rows; stages
    state = F8 * (nd * (6 + 3 * stages) + Hdd * 10 + Hn + P * n * 8)
    from wflow.model.spectral import run_summation

    if s["backend"] == "numba" and not density and run_summation(cfg) == "spectral":
        kernel = spectral_kernel(cfg)
    elif s["backend"] == "numpy":
        # one path at a time: ~6 dense (H, n, n) float64 arrays live (S, exp S, masked S,
        # its exponential, π, ...) and the (n, n) mask; the per-path outputs are stacked
        kernel = F8 * (6 * H * n * n + n * n) + F8 * 2 * (nd + Hn)
    else:
        from wflow.kernels import plan_shapes

        plan = plan_shapes(n, d, H, P, single=s["precision"] == "float32",
                           fast_exp=s["exp"] == "fast", weighted=density,
                           causal=m["mask"] == "causal",
                           symmetric=m.get("interaction", "symmetric") == "symmetric")
        # with the ledger, the symmetric pass evaluates (X_{k+1}; D_k) and (X_{k+1}; D_{k+1})
        # as one batch of 2P paths (AttentionModel.evaluate_pair): twice the buffers
        Pk = 2 * P if ledger and plan.route.symmetric else P
        kernel = F8 * (Pk * H * n * (d + 4) + Pk * n * (3 * d + 7) + Pk * d * (n + 8))
        if plan.keeps_q:  # Q = β X D_hᵀ (P, H, n, d)
            kernel += F8 * Hn * d
        if plan.band_count > 1:  # symmetric pass: band column sums, one path at a time
            kernel += F8 * H * plan.band_count * 5 * n
    if method == "jko":  # L-BFGS in tangent coordinates: ~10 pairs of (n, d) per path
        kernel += F8 * 30 * n * d

    if density:  # points (P, N, d), masses; the state ρ is (P, N) per stage and the mesh
        # (S²: ~3N edges with lengths, normals and arc moments; S¹: the grid's few arrays)
        state = F8 * (P * snap * (6 + 3 * stages) + Hdd * 10 + nd * 2)
        kernel += F8 * (40 * n if d == 3 else 4 * n)
        if cfg["density"].get("representation", "fv") == "spectral":
            # the quadrature's kernel matrices (G, G) per head, kept up to their cache's bytes
            # (one more while the oldest is evicted), and two blocks of rows of logits [model §5b]
            from wflow.model.density_spectral import CACHE_BYTES

            G2 = F8 * n * n
            kernel += (min(H * G2, CACHE_BYTES + G2) if G2 <= CACHE_BYTES else 0) + 2 * F8 * (1 << 21)
    row = F8 * (P * _n_series(cfg) + (P * snap if out["store_tokens"] else 0)
                + (Hdd if out["store_weights"] else 0)
                + (int(s["record_every"]) * P * _n_step_ledger() if ledger else 0))
    nrec = n_records(cfg)
    if keep_records:  # the rows, then the stacked arrays of the Result
        records = 2 * nrec * row
        checkpoint = 0
    else:  # the recorder's buffer and one stacked key; a checkpoint slot's copies
        buffered = max(1, min(BUFFER_RECORDS, BUFFER_BYTES // max(row, 1)))
        records = 2 * min(nrec, buffered) * row
        checkpoint = F8 * 3 * (P * snap + Hdd)

    mp = min(n, int(dg["max_pairwise_n"]))
    diag = 0
    if density:  # the token diagnostics are off for a density
        pass
    elif dg["clustering"]:  # one pass over the pairs (no Gram matrix); the centred copies
        diag = max(diag, F8 * 3 * P * mp * d)
    if dg["w2"] and not density:  # cost matrix, its square, the plan (POT)
        diag = max(diag, F8 * 3 * mp * mp)
    parts = {"process": resident(), "runtime": RUNTIME_BYTES, "state": state, "kernel": kernel,
             "records": records, "checkpoint": checkpoint, "diagnostics": diag}
    return Estimate({k: int(v) for k, v in parts.items()}, nrec)


def spectral_degree(cfg) -> int:
    r"""The degree L of the spectral summation at the run's start [model §2s]: the tail rule
    :math:`\tau_L \le \mathrm{tol}/(4n)` (:func:`wflow.kernels.spectral.degree`) at β and the
    initial weights D(0) the configuration draws (capped at
    :data:`~wflow.kernels.spectral.L_MAX`; the weights' streams do not depend on the tokens,
    which are drawn here for n = 1 only). A weight process moves D and with it L."""
    import numpy as np

    from wflow.engine import initial
    from wflow.kernels import spectral as sp

    m, s = cfg["model"], cfg["solver"]
    d, n = int(m["d"]), int(m["n"])
    one = {**cfg, "model": {**m, "n": 1},
           "init": {**cfg["init"], "tokens": "uniform", "per_path_tokens": False}}
    D0 = initial.draw(one).D0
    target = float(s["summation_tol"]) / (4.0 * n)
    beta = float(m["beta"])
    return min(max(sp.degree(beta, np.asarray(D0[p]), d, target)[0] for p in range(len(D0))),
               sp.L_MAX[d])


def spectral_kernel(cfg) -> int:
    r"""Bytes of the spectral summation's arrays at their peak [model §2s], float64 units:
    the paths of a pass are summed one after the other (:func:`wflow.model.spectral.
    spectral_pass`), each through the phases of :func:`wflow.kernels.spectral.sums`; the
    largest of

    * the synthesis: its output (6H, n) and, on T threads, the complex outputs (3H, B) of
      min(T, ⌈n/B⌉) blocks of B = min(n, 2¹⁸) points (with the angles and strengths, 4n);
    * the grid of each head, T at a time: the exponential block of ``_s2_head``
      (min(⌊2²²/G⌋, G) rows × G, and its product) and the (G, 11) weights and sums, G =
      (L_a + 1)(2L_a + 2) on S² (L_a = L + 2), the 4(L_a+1)² samples of the kernel on S¹;
    * the indicator: the sums (6Hn), S^X (3Hn), the magnitudes A (Hn) and the indicator's
      temporaries (4Hn);
    * the fallback: the sums, A, η and the truncation term (12Hn) with the direct rows of
      :func:`~wflow.kernels.spectral.direct_rows` — their outputs (d + 2)H·m for m =
      ``solver.max_flagged``·n rows (the limit: more stops the run) and five blocks of
      min(n, 2²¹) pairs;
    * the combine: the sums (9Hn), the contiguous S⁰ and Z (2Hn), v, g (2nd), four rows;

    plus, while path p > 0 is summed, the p results kept (Hn + 2nd + 2n each) and the sums of
    path p − 1 (9Hn); the stacking of the Pk results (twice the results). Pk = 2P with the
    exact ledger where its two evaluations are one batch
    (:meth:`~wflow.model.attention.AttentionModel.evaluate_pair`), else P (the field of the
    step, alive meanwhile, is counted in the state). L is :func:`spectral_degree`. Within a
    factor 2 of ``tracemalloc``'s peak where these arrays dominate (``tests/test_memory.py``,
    n = 2·10⁵ on S²; the fallback's rows are counted at their limit, so a run that flags no
    target stays below the estimate)."""
    from wflow.kernels import plan_shapes
    from wflow.kernels import spectral as sp
    from wflow.kernels.pool import get_num_threads

    m, s, dg = cfg["model"], cfg["solver"], cfg["diagnostics"]
    d, H, P, n = int(m["d"]), int(m["heads"]), int(s["paths"]), int(m["n"])
    T = max(1, int(get_num_threads()))
    Hn = H * n
    La = spectral_degree(cfg) + 2
    B = min(n, sp.BLOCK)
    synth = 6 * Hn + min(T, -(-n // sp.BLOCK)) * 6 * H * B + 4 * n
    if d == 3:
        G = (La + 1) * (2 * La + 2)
        grid = min(T, H) * (2 * min(max(1, 2**22 // G), G) * G + 25 * G)
    else:
        grid = min(T, H) * 4 * 6 * (4 * (La + 1)) ** 2
    rows = int(math.ceil(float(s["max_flagged"]) * n))
    fallback = 12 * Hn + 2 * (d + 2) * H * rows + (5 * min(n, 2**21) if rows else 0)
    one = max(synth, grid, 14 * Hn, fallback, 11 * Hn + 2 * n * d + 4 * n)
    res = Hn + 2 * n * d + 2 * n
    plan = plan_shapes(n, d, H, P, single=False, fast_exp=s["exp"] == "fast",
                       causal=False, symmetric=m.get("interaction", "symmetric") == "symmetric")
    ledger = bool(dg["ledger"]) and m["mask"] != "causal"
    Pk = 2 * P if ledger and plan.route.symmetric else P
    passes = max(one + (Pk - 1) * res + (9 * Hn if Pk > 1 else 0), 2 * Pk * res)
    return F8 * passes


def resident() -> int:
    """Resident memory of this process now, in bytes (``VmRSS``; elsewhere the peak so far)."""
    try:
        for line in PROC_STATUS.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _read_int(path: Path):
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available() -> tuple[int | None, str]:
    """(bytes the process may still allocate, where the number comes from): the cgroup v2
    limit less the group's usage where there is a limit, else ``MemAvailable``;
    ``(None, "unknown")`` where neither can be read."""
    limit = _read_int(CGROUP_MAX)
    if limit is not None:
        used = _read_int(CGROUP_CURRENT) or 0
        return max(0, limit - used), f"cgroup limit {human(limit)}, {human(used)} in use"
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable"
    except (OSError, ValueError, IndexError):
        pass
    return None, "unknown"


def check(cfg, keep_records=False) -> Estimate:
    """The estimate of ``cfg``; a ConfigError (one line, what it needs and what there is)
    when it exceeds the memory available."""
    est = estimate(cfg, keep_records)
    avail, source = available()  # the process's own memory is already in use there
    if avail is not None and est.added > avail:
        raise ConfigError(
            f"the run needs about {human(est.added)} of memory ({est.breakdown(False)}) "
            f"besides the {human(est.parts['process'])} its process holds, more than the "
            f"{human(avail)} available ({source}): reduce model.n, model.d, "
            f"model.heads or solver.paths, or keep fewer records")
    return est



# ------------------------------------------------------------------------------ disk
#: the HDF5 writer's target chunk size and its cap on rows per chunk (mirror wflow.storage._h5)
CHUNK_BYTES, CHUNK_ROWS = 2**16, 256
#: metadata of a result file: attributes (configuration, provenance), the dataset headers,
#: descriptions and checksums (measured: 180–205 kB, whatever the sizes)
H5_METADATA = 256 * 1024


def _n_series(cfg) -> int:
    """Datasets of shape (records, P): core, ledger (always written) and user series, the
    clustering / W2 diagnostics when switched on, the stepper's (JKO) series."""
    from wflow.engine import features, series

    groups = {"core", "ledger", "user"}
    if cfg["diagnostics"]["clustering"]:
        groups.add("clustering")
    if cfg["diagnostics"]["w2"]:
        groups.add("w2")
    if cfg["solver"]["method"] == "jko":
        groups.add("stepper")
    if features.of(cfg).free_energy:
        groups.add("free_energy")
    return sum(len(series.names(kind=k, group=g)) for k in ("point", "cumulative") for g in groups)


def _n_step_ledger() -> int:
    """Rows of the per-step ledger: the per-step series of :mod:`wflow.engine.series`."""
    from wflow.engine import series

    return len(series.names(kind="per_step"))


def _on_disk(nrec: int, row_bytes: int) -> int:
    """Bytes of a resizable record dataset of ``nrec`` rows: whole chunks of
    min(256, 64 kB // row) rows are allocated."""
    row_bytes = max(1, int(row_bytes))
    rows = max(1, min(CHUNK_ROWS, CHUNK_BYTES // row_bytes))
    return math.ceil(nrec / rows) * rows * row_bytes


def output_bytes(cfg) -> int:
    r"""Estimated size of the result file of the validated configuration ``cfg``:

    .. math:: \sum_{\text{datasets}} \lceil R / c \rceil\, c\, r
              + 2 \cdot 8\,(2 P s + P H d^2 + 64 P) + 256\ \text{kB},

    R records, r the bytes of a row, c = min(256, 64 kB / r) the rows of a chunk; then the two
    checkpoint slots and the metadata; s = n d floats of a path's tokens, or N cell averages
    ρ_k for a density run. Within 10 % (above) of the files written, for files of
    more than a few MB (``tests/test_memory.py``)."""
    m, s, dg, out = cfg["model"], cfg["solver"], cfg["diagnostics"], cfg["output"]
    d, H, P = int(m["d"]), int(m["heads"]), int(s["paths"])
    snap = _shape(cfg)[1]
    nrec = n_records(cfg)
    total = _on_disk(nrec, F8) + _n_series(cfg) * _on_disk(nrec, F8 * P)
    if dg["ledger"] and m["mask"] != "causal":
        total += _n_step_ledger() * _on_disk(nrec, F8 * int(s["record_every"]) * P)
    if out["store_tokens"]:
        total += _on_disk(nrec, F8 * P * snap)
    if out["store_weights"]:
        total += _on_disk(nrec, F8 * P * H * d * d)
    total += 2 * F8 * (2 * P * snap + P * H * d * d + 64 * P)
    if s.get("adaptive") and int(out.get("checkpoint_every", 0) or 0):
        # an adaptive checkpoint also holds the records filled so far, the first stages and
        # the per-path loop state [model §6d, "Checkpoints"]
        total += 2 * F8 * ((nrec + 1) * P * (snap + H * d * d + 8) + 24 * P)
    return int(total + H5_METADATA)


def disk_free(path) -> tuple[int, Path]:
    """(free bytes for an unprivileged user, the directory measured): the file system of the
    nearest existing parent of ``path`` (``shutil.disk_usage``)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        p = p.parent
    return shutil.disk_usage(p).free, p


def check_disk(nbytes: int, path, what="the result file") -> int:
    """Refuse (ConfigError, one line) when ``nbytes`` exceed the free disk at ``path``; an
    existing file at ``path`` counts as free (it is replaced). Returns the free bytes."""
    free, where = disk_free(path)
    try:
        old = os.path.getsize(path) if os.path.isfile(path) else 0
    except OSError:
        old = 0
    if nbytes > free + old:
        raise ConfigError(
            f"{path}: {what} needs about {human(nbytes)} of disk, more than the "
            f"{human(free + old)} free at {where}: choose another output location "
            f"(-o), store fewer records (solver.record_every, output.store_tokens = false) "
            f"or fewer paths")
    return free + old
