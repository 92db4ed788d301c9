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

:func:`output_bytes` bounds the size of the result file (HDF5, uncompressed: every record
dataset in whole chunks, the two checkpoint slots with every array a checkpoint holds, each
dataset's header and chunk index, the file's own structures); :func:`check_disk` refuses
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
                + (P * int(dg.get("harmonic_degree", 0)) if not density else 0)
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

    * the synthesis: its output (4H, n) — S⁰ and S^X of each head; the Itô sum comes from the
      coefficients, not the points — and, on T threads, the complex outputs (2H, B) of
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
    synth = 4 * Hn + min(T, -(-n // sp.BLOCK)) * 4 * H * B + 4 * n
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
#: the chunk index of a chunked dataset (the file format of HDF5's default ``libver``): nodes
#: of a version-1 B-tree of at most 2K = 64 entries, each 1576 + 520·rank bytes whatever it
#: holds; every node but the root holds at least K = 32
BTREE_K, BTREE_NODE, BTREE_PER_AXIS = 32, 1576, 520
#: per dataset besides its chunks and their index: its object header (272 B, up to ~600 B with
#: the four string attributes of a record dataset), its entry in the group's symbol table and
#: local heap, its attributes' strings in the global heap (measured 400–470 B on average)
DATASET_OVERHEAD = 768
#: the rest of a file: superblock, the groups (root, series, checkpoint, the slots and their
#: cum, pending, memo groups) with their symbol tables, the root's attributes besides the
#: configuration (measured 21–32 kB with the configuration)
FILE_OVERHEAD = 32 * 1024
#: the JSON of one random stream's state (a PCG64 state: ~170 characters), rounded up
RNG_JSON = 256


def _n_series(cfg) -> int:
    """Datasets of shape (records, P): core, ledger (always written) and user series, the
    clustering / W2 diagnostics when switched on, the stepper's (JKO) series."""
    from wflow.engine import series

    groups = {g for g, on in _groups(cfg).items() if on}
    if cfg["solver"]["method"] == "jko":
        groups.add("stepper")
    return sum(len(series.names(kind=k, group=g)) for k in ("point", "cumulative") for g in groups)


def _n_step_ledger() -> int:
    """Rows of the per-step ledger: the per-step series of :mod:`wflow.engine.series`."""
    from wflow.engine import series

    return len(series.names(kind="per_step"))


def _btree_nodes(entries: int) -> int:
    """Nodes of a version-1 B-tree over ``entries`` chunks, at most: one root of up to 2K
    entries; above that, leaves and inner levels of at least K entries each."""
    nodes = 1
    while entries > 2 * BTREE_K:
        entries = math.ceil(entries / BTREE_K)
        nodes += entries
    return nodes


def _dataset(rows: int, row_shape=(), itemsize: int = F8, chunk_rows: int | None = None) -> int:
    """Bytes in the file of a chunked, checksummed dataset of ``rows`` rows of ``row_shape``:
    its chunks (a record dataset's of min(256, 64 kB / row) rows; a checkpoint array's of
    min(``chunk_rows``, 64 kB / row) rows, ``chunk_rows`` its length), 4 bytes of checksum
    each, their B-tree, the dataset's own header (:data:`DATASET_OVERHEAD`)."""
    rows = max(1, int(rows))
    row = max(1, int(math.prod(row_shape)) * int(itemsize))
    if chunk_rows is None:
        c = max(1, min(CHUNK_ROWS, CHUNK_BYTES // row))
    else:
        c = max(1, min(CHUNK_BYTES // row, int(chunk_rows)))
    chunks = math.ceil(rows / c)
    index = _btree_nodes(chunks) * (BTREE_NODE + BTREE_PER_AXIS * (len(row_shape) + 1))
    return chunks * (c * row + 4) + index + DATASET_OVERHEAD


def _slot_arrays(cfg) -> list:
    """(rows, row shape, item size) of the arrays of one checkpoint slot (a scalar: rows 0):
    k, the state X (a density's ρ) and D, E0, the random streams' JSON buffer, the cumulative
    sums, the ledger's pending pieces, and under ``memo`` the step ledger, W₂'s last snapshot,
    the stepper's series and the adaptive loop state [model §6d, "Checkpoints"]."""
    from wflow.engine import features, series

    m, s = cfg["model"], cfg["solver"]
    d, H, P = int(m["d"]), int(m["heads"]), int(s["paths"])
    f = features.of(cfg)
    n, _, density = _shape(cfg)
    state = (n,) if density else (n, d)
    out = [(0, (), F8), (P, state, F8), (P, (H, d, d), F8), (P, (), F8)]
    streams = P * (2 if f.token_noise else 1)
    out.append((2 * RNG_JSON * streams + 64, (), 1))
    groups = {"token_noise": f.token_noise, "free_energy": f.free_energy}
    cum = [k for k in series.names(kind="cumulative")
           if groups.get(series.SERIES[k].group, True)]
    out += [(P, (), F8)] * len(cum)
    if f.adaptive:
        from wflow.stepping.adaptive import ADAPTIVE_SERIES, LOOP_STATE

        R = n_records(cfg)
        shapes = {"X": state, "K1": state, "Xr": (P,) + state, "D": (H, d, d),
                  "G1": (H, d, d), "Dr": (P, H, d, d)}
        out += [((R if k in ("Xr", "Dr") else P), shapes.get(k, ()), F8) for k in LOOP_STATE]
        out += [(0, (), F8)] + [(R, (P,), F8)] * len(ADAPTIVE_SERIES)  # rounds, stats_*
        return out
    if f.ledger and f.energy:  # the ledger pieces of the last step
        out += [(P, (), F8)] * 5
    if f.step_ledger:
        out.append((int(s["record_every"]), (P, _n_step_ledger()), F8))
    if f.w2:
        out += [(P, state, F8), (0, (), F8)]
    out += [(P, shape, F8) for shape in _stepper_series(cfg, n)]
    return out


def _stepper_series(cfg, n) -> list:
    """Row shapes (after the path axis) of the stepper's series, which a record and a
    checkpoint hold: () each, (n,) for the radii of the pre-, peri- and mix-LN placements
    [model §1c]; the adaptive pair's are its statistics [model §6d], a density's stepper's its
    CFL substeps and smallest cell average [model §5b]."""
    from wflow.engine import features
    from wflow.model.layernorm import RADIUS_PLACEMENTS
    from wflow.stepping.registry import get_stepper

    f = features.of(cfg)
    if f.adaptive:
        from wflow.stepping.adaptive import ADAPTIVE_SERIES

        return [()] * len(ADAPTIVE_SERIES)
    if f.density:  # a density's own stepper [model §5b]
        from wflow.stepping.density import DensityStepper

        return [()] * len(DensityStepper.series)
    try:
        names = tuple(get_stepper(cfg["solver"]["method"], cfg["solver"]).series)
    except (ValueError, KeyError, TypeError):
        names = ()
    shapes = [() for _ in names]
    if cfg["model"].get("layernorm", "post") in RADIUS_PLACEMENTS:
        shapes.append((n,))
    return shapes


def _record_series(cfg) -> int:
    """Record datasets of shape (records, P): the point and cumulative series of the groups
    the run writes (core, ledger, user; clustering, W₂, a density's, the noise's and the free
    energy's when on)."""
    from wflow.engine import series

    on = _groups(cfg)
    return sum(1 for s in series.SERIES.values()
               if s.kind in ("point", "cumulative") and on.get(s.group, False))


def _groups(cfg) -> dict[str, bool]:
    """The series groups (:mod:`wflow.engine.series`) a run of ``cfg`` records."""
    from wflow.engine import features

    f = features.of(cfg)
    return {"core": True, "ledger": True, "user": True, "clustering": f.clustering, "w2": f.w2,
            "density": f.density, "token_noise": f.token_noise, "free_energy": f.free_energy,
            "spectral": f.spectral}


def output_bytes(cfg) -> int:
    r"""An upper bound of the size of the result file of the validated configuration ``cfg``:

    .. math:: \sum_{\text{record datasets}} \mathrm{size}(R, r)
              + 2 \sum_{\text{slot arrays}} \mathrm{size}(L, r) + F,
              \qquad \mathrm{size}(L, r) = k\,(c\,r + 4) + B(k)\,(1576 + 520\,q) + h,

    R records, r the bytes of a row, c the rows of a chunk (a record dataset's min(256,
    64 kB / r); a checkpoint array's of L rows min(L, 64 kB / r)), k = ⌈L / c⌉ chunks with
    their 4-byte checksums, B(k) the nodes of their B-tree (:func:`_btree_nodes`), each
    1576 + 520 q bytes for a dataset of rank q, h the dataset's header
    (:data:`DATASET_OVERHEAD`); the two checkpoint slots hold the arrays of
    :func:`_slot_arrays` (an adaptive run's: the loop state with its records filled so far);
    F (:data:`FILE_OVERHEAD` and twice the configuration's JSON, in whole 4 kB pages) the
    file's own structures. A snapshot is n d floats of a path's tokens, or N cell averages
    ρ_k for a density run. Within 30 % above the files written (``tests/test_memory.py``),
    except an adaptive run that ends before its first checkpoint (fewer rounds than
    ``output.checkpoint_every``): its slots hold no loop state."""
    import json

    from wflow.engine import features

    m, s, out = cfg["model"], cfg["solver"], cfg["output"]
    d, H, P = int(m["d"]), int(m["heads"]), int(s["paths"])
    f = features.of(cfg)
    n, _, density = _shape(cfg)
    state = (n,) if density else (n, d)
    nrec = n_records(cfg)
    total = _dataset(nrec) + _record_series(cfg) * _dataset(nrec, (P,))  # t, (R, P) series
    if f.step_ledger:
        total += _n_step_ledger() * _dataset(nrec, (int(s["record_every"]), P))
    if out["store_tokens"]:
        total += _dataset(nrec, (P,) + state)
    if out["store_weights"]:
        total += _dataset(nrec, (P, H, d, d))
    L = int(cfg["diagnostics"].get("harmonic_degree", 0))
    if L and not density:  # the harmonic power per degree [model §8]
        total += _dataset(nrec, (P, L))
    total += sum(_dataset(nrec, (P,) + shape) for shape in _stepper_series(cfg, n))
    for rows, shape, item in _slot_arrays(cfg):
        total += 2 * (_dataset(rows, shape, item, chunk_rows=rows) if rows
                      else DATASET_OVERHEAD + F8)
    config = 4096 * math.ceil(len(json.dumps(cfg, default=str)) / 4096)  # in whole pages
    return int(total + FILE_OVERHEAD + 2 * config)


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
