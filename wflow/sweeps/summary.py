r"""The summary of a sweep: one row per grid point and Monte Carlo path (the swept values,
late-window means t ≥ T/2 of G², G²_hm and 𝒟, the final energy, clusters, order parameter,
ledger and paper residuals, status, error, wall time, worker), written beside the results as
``sweep_summary.h5`` and ``sweep_summary.csv`` and read back as an ``xarray.Dataset``."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np

from wflow.storage.files import replacing

FAILED = "failed"

#: the numeric columns of the summary, besides the swept values: ``(column, series, how)``;
#: ``how`` is ``"late"`` (mean over the records t ≥ T/2), ``"final"`` (the last record) or a
#: function ``(t, a, T) -> (P,)`` of the record times, the series (records, paths) and T.
#: A study adds its own through ``Study.summary_columns``.
SUMMARY_COLUMNS = (
    ("G2", "G2", "late"), ("G2_hm", "G2_hm", "late"), ("dissipation", "dissipation", "late"),
    ("energy_final", "energy", "final"), ("n_clusters", "n_clusters", "final"),
    ("order_parameter", "order_parameter", "final"),
    ("ledger_residual", "ledger_residual", "final"), ("paper_residual", "paper_residual", "final"),
)


def _get(cfg, dotted):
    sec, key = dotted.split(".", 1)
    return cfg.get(sec, {}).get(key)


def _swept_keys(points):
    """Dotted keys whose value differs between grid points (besides the batching keys)."""
    if len(points) < 2:
        return []
    flat = [{f"{s}.{k}": v for s, sec in pt.cfg.items() if isinstance(sec, dict)
             for k, v in sec.items()} for pt in points]
    keys = []
    for k in flat[0]:
        vals = [json.dumps(f.get(k), sort_keys=True, default=str) for f in flat]
        if len(set(vals)) > 1 and k not in ("output.path",):
            keys.append(k)
    return keys


def _non_default_keys(points):
    """Dotted keys whose value differs from the embedded default run in some grid point
    (besides where the results are written and the path batching): with the swept keys,
    every setting a summary row stands for."""
    from wflow import config as _config

    default = _config.validate(_config.default_config(), ())
    skip = set(_config.NOT_COMPUTATION) | {"init.first_path"}
    keys = []
    for pt in points:
        for s, sec in pt.cfg.items():
            if not isinstance(sec, dict):
                continue
            for k, v in sec.items():
                key = f"{s}.{k}"
                if key not in skip and key not in keys and v != default.get(s, {}).get(k):
                    keys.append(key)
    return keys


def _late(t, T):
    m = t >= T / 2
    return m if m.any() else np.ones_like(t, dtype=bool)


def _column(arr, series, how, T, late, P):
    a = arr.get(series)
    if a is None:
        return np.full(P, np.nan)
    if how == "late":
        return np.mean(a[late], axis=0)
    if how == "final":
        return a[-1]
    return np.asarray(how(arr["t"], a, T), dtype=float)


def summary_rows(points, rows, failed, keys=None, columns=()):
    """The summary as ordered columns (dict name -> list), one row per grid point and path."""
    from wflow.storage import io

    keys = _swept_keys(points) if keys is None else list(keys)
    keys += [k for k in _non_default_keys(points) if k not in keys]
    spec = tuple(SUMMARY_COLUMNS) + tuple(c for c in columns
                                          if c[0] not in {s[0] for s in SUMMARY_COLUMNS})
    cols = {"point": [], "path": [], **{k: [] for k in keys},
            **{c: [] for c, _, _ in spec},
            "status": [], "error": [], "wall_time": [], "worker": []}
    it = iter(rows)
    for pt in points:
        prow = [next(it) for _ in pt.batches]
        P = int(pt.cfg["solver"]["paths"])
        per_path = [None] * P
        vals = {}
        if pt.name not in failed:
            _, arr, attrs = io.read(pt.path, tokens=False)
            T = float(pt.cfg["solver"]["T"])
            late = _late(arr["t"], T)
            for c, s, how in spec:
                vals[c] = _column(arr, s, how, T, late, P)
            stored = json.loads(attrs.get("sweep_batches", "[]") or "[]")
            for (a, k, *_), r, b in itertools.zip_longest(pt.batches, prow, stored):
                if r["action"].startswith("skipped") and b is not None:
                    r = {**r, "elapsed": b["elapsed"], "worker": b["worker"]}
                elif r["action"].startswith("skipped") and len(pt.batches) == 1:
                    r = {**r, "elapsed": attrs.get("elapsed_last_invocation", np.nan),
                         "worker": attrs.get("sweep_worker", "")}
                for p in range(a, a + k):
                    per_path[p] = r
        else:
            for (a, k, *_), r in zip(pt.batches, prow):
                for p in range(a, a + k):
                    per_path[p] = r
        for p in range(P):
            r = per_path[p]
            cols["point"].append(pt.name)
            cols["path"].append(int(pt.cfg["init"].get("first_path", 0)) + p)
            for k in keys:
                v = _get(pt.cfg, k)
                cols[k].append(v if isinstance(v, (int, float, str, bool)) else json.dumps(v))
            for c, _, _ in spec:
                cols[c].append(float(vals[c][p]) if vals else np.nan)
            cols["status"].append(FAILED if pt.name in failed else "complete")
            cols["error"].append(r["error"] if r["status"] == FAILED else "")
            cols["wall_time"].append(float(r["elapsed"]))
            cols["worker"].append(str(r["worker"]))
    return cols


def _write_summary(outdir: Path, cols):
    """Write ``sweep_summary.h5`` and ``.csv``, each under a temporary name renamed when
    complete."""
    from wflow.storage.tables import write_columns

    h5, csvp = outdir / "sweep_summary.h5", outdir / "sweep_summary.csv"
    write_columns(h5, cols, "wflow-sweep-summary/1")
    with replacing(csvp) as tmpc, open(tmpc, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(cols))
        for row in zip(*cols.values()):
            w.writerow([f"{x:.17g}" if isinstance(x, float) else x for x in row])
    return h5, csvp


def _to_dataset(cols):
    import xarray as xr

    n = len(cols["point"])
    data = {k: ("row", np.asarray(v, dtype=object if v and isinstance(v[0], str) else None))
            for k, v in cols.items() if k not in ("point", "path")}
    return xr.Dataset(data, coords={"row": np.arange(n), "point": ("row", np.asarray(
        cols["point"], dtype=object)), "path": ("row", np.asarray(cols["path"], dtype=int))})


def read_summary(outdir):
    """The summary of a sweep directory (``sweep_summary.h5``) as an ``xarray.Dataset``."""
    from wflow.storage.tables import read_columns

    cols = read_columns(Path(outdir) / "sweep_summary.h5")
    return _to_dataset(cols)
