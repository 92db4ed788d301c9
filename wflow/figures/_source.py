"""The source of a run's figure: read with its attributes (status, records expected), and
the title every such figure carries (heads, run parameters, a partial run's note and
watermark)."""

from __future__ import annotations

import os

import numpy as np

from wflow.figures._figbase import (
    _C,
    _cfg,
    _check_formats,
    _describe,
    _load,
    _time,
)

_SOURCE_PARAMS = """

    Parameters
    ----------
    src : path, Result or (config, arrays)
    outdir : path-like
    formats : sequence of str

    Returns
    -------
    list of Path
    """


def _load_all(src):
    """``(config, arrays, attrs)``: a file is read with its attributes (status, ...); a
    ``(config, arrays, attrs)`` triple keeps them; other sources have none."""
    if isinstance(src, (str, os.PathLike)):
        from wflow.storage.io import read

        src = read(src)
    config, arrays = _load(src)
    if isinstance(src, (tuple, list)) and len(src) == 3 and isinstance(src[2], dict):
        attrs = src[2]
    else:
        attrs = dict(getattr(src, "attrs", None) or {})
    return config, arrays, attrs


def _inputs(src, formats):
    """Checked formats, the source's config, arrays and attributes, and its record times."""
    formats = _check_formats(formats)
    config, arrays, attrs = _load_all(src)
    return formats, config, arrays, attrs, _time(arrays)


def _heads(config) -> str:
    """``H = 4 attention heads`` / ``H = 4: 2 attention + 2 Laplacian heads``."""
    H = _cfg(config, "model", "heads", None)
    lap = _cfg(config, "model", "laplacian_heads", None) or []
    if H is None:
        return "H = ?"
    k = min(int(H), lap) if isinstance(lap, (int, np.integer)) else len(set(lap))
    if k == 0:
        return f"H = {H} attention head{'s' if H != 1 else ''}"
    if k == H:
        return f"H = {H} Laplacian head{'s' if H != 1 else ''}"
    return f"H = {H}: {H - k} attention + {k} Laplacian head{'s' if k != 1 else ''}"


def _status_note(attrs, arrays) -> str:
    """'' for a complete source; else what is partial about it, for the title."""
    status = attrs.get("status")
    if status in (None, "complete"):
        return ""
    n = len(np.asarray(arrays["t"]))
    expected = attrs.get("n_records_expected")
    of = f" of {int(expected)}" if expected is not None else ""
    what = "FAILED run" if status == "failed" else "PARTIAL (run not complete)"
    return f"{what}: {n}{of} records"


def _title(fig, head, config, arrays, attrs):
    """Suptitle: ``head``, the heads and run parameters, and the partial-file note (with a
    watermark across the figure)."""
    desc = _describe(config, arrays)
    rest = desc.split(", ", 1)[1] if desc.startswith("H = ") and ", " in desc else desc
    width = int(fig.get_figwidth() * 12)  # characters of the title font across the figure
    lines = [""]
    for part in f"{_heads(config)}, {rest}".split(", "):  # wrap between the parameters
        if lines[-1] and len(lines[-1]) + 2 + len(part) > width:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] += (", " if lines[-1] else "") + part
    text = head + "\n" + "\n".join(lines)
    note = _status_note(attrs, arrays)
    if note:
        text = f"{note}\n{text}"
        fig.text(0.5, 0.5, "PARTIAL", fontsize=60, color=_C["red"], alpha=0.12,
                 rotation=25, ha="center", va="center", zorder=0)
    fig.suptitle(text, color=_C["red"] if note else "black")
    return text


def _source_doc(fn):
    """Append the parameters every single-source figure shares to ``fn``'s docstring."""
    fn.__doc__ = (fn.__doc__ or "").rstrip() + _SOURCE_PARAMS
    return fn
