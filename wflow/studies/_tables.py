"""The result tables of the studies: the final state of a run, the default summary table, the
CSV writer and the generic run figures (no study class: :mod:`wflow.studies._base` and the
studies import them)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np

from wflow.analysis.results import load_source
from wflow.errors import ConfigError
from wflow.storage.files import replacing

log = logging.getLogger(__name__)

__all__ = ["final_state", "write_csv", "summary_table"]


def final_state(source) -> np.ndarray:
    """The last record of a result's tokens ``X`` (P, n, d) or density ``rho`` (P, N)
    (a path or a :class:`~wflow.engine.run.Result`); ConfigError if it stored neither."""
    _, arr = load_source(source)
    for key in ("rho", "X"):
        if key in arr:
            return np.asarray(arr[key][-1], dtype=float)
    raise ConfigError("continued: the previous result stored no tokens or density "
                      "(output.store_tokens = true)")


#: the mark on every figure of a quick study
def write_csv(table: dict, path):
    """Write a column table (column → list of equal length) as CSV (under a temporary name,
    renamed when complete)."""
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    if any(len(table[c]) != n for c in cols):
        raise ValueError("write_csv: the columns of the table differ in length")
    with replacing(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i in range(n):
            w.writerow([table[c][i] for c in cols])


# ---------------------------------------------------------------------------------- helpers
def _final_mean(arrays, key):
    a = np.asarray(arrays[key], dtype=float)
    return float(np.nanmean(a[-1]))


def summary_table(paths, keys=("variance", "spectral_rank", "order_parameter", "n_clusters",
                               "G2")):
    """``(text, table)``: final-record means over paths of ``keys``, one row per result file."""
    lines = [f"{'run':<34}" + "".join(f"{k:>16}" for k in keys)]
    table = {"run": [], **{k: [] for k in keys}}
    for p in paths:
        _, arr = load_source(p)
        vals = [_final_mean(arr, k) for k in keys]
        lines.append(f"{Path(p).stem:<34}" + "".join(f"{v:>16.4g}" for v in vals))
        table["run"].append(Path(p).stem)
        for k, v in zip(keys, vals):
            table[k].append(v)
    return "\n".join(lines), table


def _run_figures(paths, outdir, formats, kinds):
    from wflow.figures import plotting

    out = []
    for p in paths:
        for kind in kinds:
            out += plotting.plot(p, kind, Path(outdir) / Path(p).stem, formats=formats) or []
    return out
