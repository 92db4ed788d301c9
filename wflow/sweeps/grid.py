"""A grid of configurations (:func:`expand_grid`: every combination of the values of some keys,
one named task each, with its own or a common random stream) and the checks of a sweep's
arguments made before anything is written (names, executor, the space partial files hold,
Dask installed and its scheduler answering)."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from pathlib import Path

import numpy as np

from wflow import config as _config
from wflow.errors import ConfigError
from wflow.sweeps.summary import _get

__all__ = ["expand_grid", "point_seed", "check_name", "check_executor", "partial_bytes",
           "EXECUTORS", "STREAMS"]

EXECUTORS = ("serial", "dask")
STREAMS = ("common", "independent")

def _set(cfg, dotted, value):
    sec, key = dotted.split(".", 1)
    cfg.setdefault(sec, {})[key] = value



def _label(v):
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "-".join(_label(x) for x in v) or "none"
    return str(v)


def point_seed(seed: int, values: dict) -> int:
    """The seed of a grid point under ``streams = "independent"``: from the base seed and the
    swept ``{dotted key: value}`` (not the position in the grid)."""
    text = json.dumps({k: values[k] for k in sorted(values)}, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).digest()
    words = [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]
    state = np.random.SeedSequence([int(seed), *words]).generate_state(2, np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1  # < 2**63


def check_name(name, what="name"):
    """Raise :class:`ConfigError` unless ``name`` is a plain file name (it names a result file
    inside the output folder: no path separator, not ``.``-led, not empty)."""
    text = str(name)
    if not text or "/" in text or "\\" in text or "\0" in text or text.startswith("."):
        raise ConfigError(f"{what} = {text!r}: must be a plain file name (no '/' or '\\', "
                          f"not starting with '.'): it names result files inside the output "
                          f"folder")


def check_executor(executor, address=None, n_workers=None):
    """Raise :class:`ConfigError` (one line) for an executor setting that would be ignored or
    is impossible: an unknown executor, ``address`` without the Dask executor, ``n_workers``
    below 1."""
    if executor not in EXECUTORS:
        raise ConfigError(f"executor = {executor!r}: allowed values are {', '.join(EXECUTORS)}")
    if address is not None and executor != "dask":
        raise ConfigError(f"address = {address!r} (--address) with executor = {executor!r}: a "
                          f"scheduler address needs executor = 'dask' (--executor dask)")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int)
                                  or n_workers < 1):
        raise ConfigError(f"n_workers = {n_workers!r} (--workers): must be an integer >= 1")


def partial_bytes(outdir, names) -> int:
    """Bytes on disk of the partial files of the tasks ``names`` in ``outdir`` (a grid point's
    ``.<name>.h5.part``, its batch files and theirs): a rerun continues them in place, so the
    space they hold is part of what the rerun needs, not more."""
    outdir = Path(outdir)
    files = []
    for name in names:
        files.append(_part(outdir / f"{name}.h5"))
        batches = outdir / f"{name}.batches"
        if batches.is_dir():
            files += [p for p in batches.iterdir() if p.suffix in (".h5", ".part")]
    total = 0
    for p in files:
        try:
            st = p.stat()
        except OSError:
            continue
        blocks = getattr(st, "st_blocks", None)  # the space allocated (Unix), else the size
        total += st.st_size if blocks is None else 512 * blocks
    return total


def expand_grid(base, grid: dict, name="run", streams="common"):
    """The Cartesian product of ``grid`` (dotted key -> list of values) over ``base``.

    Returns a list of ``(name, config)``; names are ``name-key=value-...`` with short keys.
    Every configuration is validated (a bad value raises ConfigError naming it).
    ``streams``: "common" (every point keeps the base seed) or "independent" (a seed per
    point from the base seed and its values, :func:`point_seed`).
    """
    if streams not in STREAMS:
        raise ConfigError(f"streams = {streams!r}: allowed values are {', '.join(STREAMS)}")
    check_name(name)
    base = _config.resolve(base) if base is None or not isinstance(base, dict) else base
    keys = list(grid)
    out = []
    for values in itertools.product(*(grid[k] for k in keys)):
        cfg = copy.deepcopy(base)
        for k, v in zip(keys, values):
            _set(cfg, k, v)
        if streams == "independent" and "init.seed" not in keys:
            seed = _get(cfg, "init.seed")
            _set(cfg, "init.seed", point_seed(0 if seed is None else seed, dict(zip(keys, values))))
        tag = "-".join(f"{k.split('.')[-1]}={_label(v)}" for k, v in zip(keys, values))
        out.append((f"{name}-{tag}" if tag else name, _config.validate(cfg)))
    return out



def _part(path: Path) -> Path:
    return path.with_name(f".{path.name}.part")


def _require_dask():
    """Raise :class:`ConfigError` (one line: what to install) unless ``dask.distributed``
    imports."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise ConfigError(
            "executor = 'dask' needs dask.distributed, which is not installed: "
            "pip install 'wflow[distributed]'"
        ) from None


CONNECT_TIMEOUT = 10.0


def _connect(Client, address):
    """A Dask client of the scheduler at ``address``; one ConfigError line when none answers
    within :data:`CONNECT_TIMEOUT` seconds."""
    try:
        return Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        msg = (str(exc).splitlines() or [""])[0] or type(exc).__name__
        raise ConfigError(f"address = {address!r} (--address): no Dask scheduler answers there "
                          f"within {CONNECT_TIMEOUT:g} s ({msg[:200]})") from None
