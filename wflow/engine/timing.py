r"""How long a run will take, before it runs: a rate of pair terms per second times the work.

The work of a run is its number of pair terms,

.. math::

    W = N_{\text{steps}}\, s\, P\, H\, n^2,

with :math:`s` the field evaluations per step of the method
(:func:`wflow.stepping.registry.stepper_stages`), :math:`P` the
paths, :math:`H` the heads and :math:`n` the tokens (the cells of a density run). The rate
comes from this machine's last complete ``wflow run`` with the same backend and precision
(saved by :func:`record` in :func:`rates_file`), or else from :data:`ROUGH_RATES`, a rough
figure of the order of the documentation's performance table. Nothing is compiled or run to
make the estimate; it is a guide to the order of magnitude (diagnostics, records and small
sizes, where fixed costs dominate, are not modelled), not a promise.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from wflow.errors import WriteError
from wflow.stepping.registry import stepper_stages
from wflow.storage.files import replacing

__all__ = ["work", "estimate", "record", "rates_file", "ROUGH_RATES"]

#: pair terms per second where this machine has no saved rate: a 2-core x86-64 machine,
#: large n, float64 (the numba kernels with their fast exponential; the NumPy reference)
ROUGH_RATES = {"numba": 5e8, "numpy": 5e6}


def work(cfg) -> float:
    """The pair terms :math:`N_{\\text{steps}}\\, s\\, P\\, H\\, n^2` of the validated ``cfg``."""
    m, s = cfg["model"], cfg["solver"]
    steps = round(float(s["T"]) / float(s["dt"]))
    n = int(m["n"])
    if s.get("representation") == "density":
        n = int(cfg.get("density", {}).get("cells", n))
    return float(steps * stepper_stages(s["method"]) * int(s["paths"]) * int(m["heads"]) * n * n)


def rates_file() -> Path:
    """Where the measured rates are kept: ``$WFLOW_CACHE_DIR/rates.json``, else
    ``$XDG_CACHE_HOME/wflow/rates.json`` (default ``~/.cache/wflow/rates.json``)."""
    root = os.environ.get("WFLOW_CACHE_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wflow"
    return Path(root) / "rates.json"


def _key(cfg) -> str:
    s = cfg["solver"]
    return f"{platform.machine()}/{s['backend']}/{s.get('precision', 'float64')}"


def _load() -> dict:
    try:
        data = json.loads(rates_file().read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def estimate(cfg) -> tuple[float, str]:
    """``(seconds, where the rate comes from)`` for the validated ``cfg``."""
    saved = _load().get(_key(cfg))
    if isinstance(saved, dict) and float(saved.get("rate", 0)) > 0:
        rate = float(saved["rate"])
        return work(cfg) / rate, (f"at this machine's rate of its last run, n = {saved.get('n')}"
                                  f": {rate:.2g} pair terms/s")
    rate = ROUGH_RATES.get(cfg["solver"]["backend"], min(ROUGH_RATES.values()))
    return work(cfg) / rate, (f"a rough figure, {rate:.2g} pair terms/s: a first run on this "
                              f"machine calibrates it")


#: Runs shorter than this (seconds), dominated by fixed costs, save no rate.
MIN_RECORDED_S = 0.5


def record(cfg, seconds) -> None:
    """Save the rate of a complete run that took ``seconds`` (runs under
    :data:`MIN_RECORDED_S`, dominated by fixed costs, are not saved). Written to a temporary
    name and renamed; a cache that cannot be written is skipped silently (it is only a guide)."""
    if not seconds or seconds < MIN_RECORDED_S:
        return
    data = _load()
    data[_key(cfg)] = {"rate": work(cfg) / float(seconds), "n": int(cfg["model"]["n"])}
    path = rates_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(path, sync=False) as tmp:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True), "utf-8")
    except (OSError, WriteError):
        pass


def human_seconds(sec) -> str:
    """``"40 s"``, ``"3.2 min"``, ``"5.1 h"``, ``"2.3 days"``."""
    if sec < 90:
        return f"{sec:.2g} s"
    if sec < 5400:
        return f"{sec / 60:.2g} min"
    if sec < 2 * 86400:
        return f"{sec / 3600:.2g} h"
    return f"{sec / 86400:.2g} days"
