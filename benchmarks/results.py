"""Saved benchmark results: the machine, the JSON file, the table of ``docs/performance.md``.

A result is a dict (:data:`SCHEMA`, version :data:`VERSION`)::

    {"schema": 1, "date": "2026-12-02T17:10:00+00:00", "commit": "abc1234…", "dirty": false,
     "machine": {...}, "load": {"before": [1, 5, 15 min], "after": [...]}, "note": "...",
     "suites": ["field", ...], "seconds": 412.0, "rows": [row, ...]}

Every row compares wflow with a baseline measured in the same run::

    {"suite": "field", "case": "(200, 10, 3) P=10", "what": "numpy twin ÷ wflow",
     "ratio": 31.2, "ratio_q": [lo, hi] or null, "goal": "≥ 0.9" or "",
     "seconds": wflow's seconds per call or null, "status": "ok" or "skipped: …",
     "data": {suite-specific numbers}}

A ratio above 1 means wflow (or the route, the configuration named first) is faster.
Missing numbers are ``null`` (the files are strict JSON).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
from pathlib import Path

VERSION = 1
#: Keys of a result and of each of its rows.
SCHEMA = {"result": ("schema", "date", "commit", "dirty", "machine", "load", "note", "suites",
                     "seconds", "rows"),
          "row": ("suite", "case", "what", "ratio", "ratio_q", "goal", "seconds", "status",
                  "data")}
#: The repository (the parent of ``benchmarks/``) and the default places.
ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "performance.md"
BEGIN = "<!-- benchmarks: begin (written by `python -m benchmarks.render`) -->"
END = "<!-- benchmarks: end -->"
#: The page's sections: a result of the ``scale`` suite alone has a table of its own (its run
#: takes about an hour and is made apart from the default suites).
MARKERS = {"main": (BEGIN, END),
           "scale": ("<!-- benchmarks scale: begin (written by `python -m benchmarks.render`) -->",
                     "<!-- benchmarks scale: end -->")}
#: The CPU flags the kernels' code paths depend on (vector width, fused multiply-add).
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl")


def row(suite, case, what, ratio=None, *, ratio_q=None, goal="", seconds=None, status="ok",
        data=None):
    """One row of a result (:data:`SCHEMA`).

    Parameters
    ----------
    suite, case, what : str
        The suite, the case (``"(n, H, d) P=P"``) and what the ratio divides.
    ratio : float, optional
        The ratio (NaN and None: no ratio).
    ratio_q : pair of float, optional
        Its lower and upper quartiles over rounds.
    goal : str
        The goal, e.g. ``"≥ 0.9"``, or "".
    seconds : float, optional
        wflow's seconds per call (for scale).
    status : str
        ``"ok"``, ``"ok: …"`` or ``"skipped: <why>"``.
    data : dict, optional
        The suite's raw numbers.

    Returns
    -------
    dict
        With NaN and infinite numbers as None (strict JSON).
    """
    return {"suite": suite, "case": case, "what": what, "ratio": _num(ratio),
            "ratio_q": None if ratio_q is None else [_num(q) for q in ratio_q],
            "goal": goal, "seconds": _num(seconds), "status": status,
            "data": _clean(data or {})}


def _num(v):
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _clean(obj):
    """``obj`` with NaN and infinite floats as None, tuples as lists (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "item"):  # a NumPy scalar
        return _clean(obj.item())
    return obj


# ---------------------------------------------------------------------- machine
def _cpuinfo():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info = {}
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags") and key not in info:
            info[key] = val.strip()
    return info


def _version(module):
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def machine_info():
    """The machine and the software of this process.

    Returns
    -------
    dict
        ``cpu`` (model name), ``cpu_flags`` (those of :data:`CPU_FLAGS` present),
        ``cpu_flags_absent``, ``llvm_cpu`` (what numba compiles for), ``logical_cpus``,
        ``usable_cpus`` (affinity), ``numba_threads``, ``system``, ``python``, and the
        versions of wflow, numpy, numba, llvmlite and torch (None if not installed).
    """
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        import llvmlite.binding as llvm

        llvm_cpu = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    except Exception:
        llvm_cpu = None
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:
        threads = None
    return {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [f for f in CPU_FLAGS if f in flags],
        "cpu_flags_absent": [f for f in CPU_FLAGS if flags and f not in flags],
        "llvm_cpu": llvm_cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "numba_threads": threads,
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "versions": {m: _version(m) for m in ("wflow", "numpy", "numba", "llvmlite", "torch")},
    }


def loadavg():
    """The 1, 5 and 15 minute load averages (None where unknown)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def git_commit(root=ROOT):
    """(commit hash or "unknown", whether tracked files differ from it)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return head, bool(dirty.strip())


def new_result(suites, note=""):
    """The head of a result, without rows.

    Parameters
    ----------
    suites : sequence of str
        The suites the result will hold.
    note : str
        A sentence saved with it (e.g. what else ran on the machine).

    Returns
    -------
    dict
        Date (UTC), commit, machine, the load averages at the start (``load["before"]``);
        ``rows`` empty.
    """
    commit, dirty = git_commit()
    return {"schema": VERSION, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "dirty": dirty, "machine": machine_info(),
            "load": {"before": loadavg(), "after": None}, "note": note,
            "suites": list(suites), "seconds": None, "rows": []}


# ---------------------------------------------------------------------- files
def validate(result):
    """Raise ValueError unless ``result`` has the keys of :data:`SCHEMA` and its version."""
    if not isinstance(result, dict):
        raise ValueError("a result is a JSON object")
    missing = [k for k in SCHEMA["result"] if k not in result]
    if missing:
        raise ValueError(f"result without {', '.join(missing)}")
    if result["schema"] != VERSION:
        raise ValueError(f"result schema {result['schema']!r}: this code reads {VERSION}")
    for i, r in enumerate(result["rows"]):
        missing = [k for k in SCHEMA["row"] if k not in r]
        if missing:
            raise ValueError(f"row {i} without {', '.join(missing)}")
    return result


def file_name(result):
    """``<date>-<commit>.json`` (12 hex digits; ``-dirty`` when tracked files differed)."""
    day = result["date"][:10]
    return f"{day}-{result['commit'][:12]}{'-dirty' if result['dirty'] else ''}.json"


def save(result, directory=RESULTS_DIR):
    """Write a result as strict JSON.

    Parameters
    ----------
    result : dict
        A result (validated first).
    directory : path-like
        Where; created if missing. The name is :func:`file_name`.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    validate(result)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(result)
    text = json.dumps(_clean(result), indent=1, ensure_ascii=False, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load(path):
    """The result saved at ``path`` (validated)."""
    return validate(json.loads(Path(path).read_text(encoding="utf-8")))


def section(result):
    """The page section of a result (:data:`MARKERS`): ``"scale"`` for the ``scale`` suite
    alone, else ``"main"``."""
    return "scale" if list(result["suites"]) == ["scale"] else "main"


def latest(directory=RESULTS_DIR, of="main"):
    """The path of the newest result in ``directory`` (by its date) of the section ``of``
    (:func:`section`), or None."""
    best = None
    for p in Path(directory).glob("*.json"):
        try:
            res = load(p)
            date = res["date"]
        except (ValueError, OSError):
            continue
        if section(res) != of:
            continue
        if best is None or date > best[0]:
            best = (date, p)
    return None if best is None else best[1]


# ---------------------------------------------------------------------- table
def _ratio(r):
    if r["ratio"] is None:
        return "-"
    text = f"{r['ratio']:.2f}" if r["ratio"] < 10 else f"{r['ratio']:.0f}"
    if r["ratio_q"]:
        lo, hi = r["ratio_q"]
        text += f" ({lo:.2f}–{hi:.2f})"
    return text


_GOAL = re.compile(r"^\s*(>|≥|<|≤)\s*([0-9.]+)")


def goal_met(r):
    """Whether a row's ratio meets its goal (``"> 1: …"``, ``"≥ 0.9"``, ``"≤ 1.80"``, …):
    True, False, or None (no goal, or no ratio)."""
    m = _GOAL.match(r["goal"] or "")
    if m is None or r["ratio"] is None:
        return None
    x, g = r["ratio"], float(m.group(2))
    return {">": x > g, "≥": x >= g, "<": x < g, "≤": x <= g}[m.group(1)]


def _seconds(t):
    if t is None:
        return "-"
    if t < 1e-3:
        return f"{t * 1e6:.0f} µs"
    if t < 1:
        return f"{t * 1e3:.3g} ms"
    return f"{t:.3g} s"


def _load(v):
    return "unknown" if not v else f"{v[0]:.2f}"


def render_table(result, path_label=""):
    """The Markdown of a result: where and when (a short list), then one table of every row."""
    m = result["machine"]
    v = m["versions"]
    soft = ", ".join(f"{k} {v[k]}" for k in ("wflow", "numpy", "numba", "llvmlite") if v.get(k))
    soft += f", torch {v['torch']}" if v.get("torch") else ", torch not installed"
    load = (f"1-minute load average {_load(result['load']['before'])} at the start of the "
            f"run, {_load(result['load']['after'])} at its end")
    lines = [
        f"- result: {path_label or file_name(result)}, suites {', '.join(result['suites'])}, "
        f"{_seconds(result['seconds'])} in all",
        f"- commit: `{result['commit'][:12]}`"
        + (" with uncommitted changes" if result["dirty"] else "") + f", {result['date']}",
        f"- machine: {m['cpu']}, numba compiles for `{m['llvm_cpu']}`; {m['usable_cpus']} usable "
        f"of {m['logical_cpus']} logical CPUs, {m['numba_threads']} numba threads; {m['system']}",
        f"- CPU flags: {', '.join(m['cpu_flags']) or 'none of those listed'}"
        + (f" (absent: {', '.join(m['cpu_flags_absent'])})" if m["cpu_flags_absent"] else ""),
        f"- software: Python {m['python']}, {soft}",
        f"- load: {load}" + (f"; {result['note']}" if result["note"] else ""),
        "",
        "| suite | case (n, H, d) | ratio of | ratio (quartiles) | goal | met | wflow time "
        "| status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        met = {True: "yes", False: "**no**", None: "-"}[goal_met(r)]
        lines.append(f"| {r['suite']} | {r['case']} | {r['what']} | {_ratio(r)} | "
                     f"{r['goal'] or '-'} | {met} | {_seconds(r['seconds'])} | {r['status']} |")
    return "\n".join(lines)


def write_doc(result, doc=DOC, path_label=""):
    """Replace the text between the markers of the result's section (:data:`MARKERS`,
    :func:`section`) in a page by the table.

    Parameters
    ----------
    result : dict
        The result (:func:`render_table`).
    doc : path-like
        The Markdown page holding the markers.
    path_label : str
        How the table names the result file.

    Returns
    -------
    pathlib.Path
        The page.

    Raises
    ------
    ValueError
        If the page lacks the markers.
    """
    doc = Path(doc)
    text = doc.read_text(encoding="utf-8")
    begin, end = MARKERS[section(result)]
    try:
        a = text.index(begin) + len(begin)
        b = text.index(end, a)
    except ValueError:
        raise ValueError(f"{doc}: no {begin!r} … {end!r} markers") from None
    doc.write_text(text[:a] + "\n" + render_table(result, path_label) + "\n" + text[b:],
                   encoding="utf-8")
    return doc

