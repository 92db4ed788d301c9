"""Arrays kept between field passes of one Python thread.

The row sums (P, H, n[, d]) and the symmetric pass's scratch are rewritten by every pass and
never returned: keeping them for the last :data:`_WORKSPACE_SHAPES` shapes avoids their page
faults at every call (see benchmarks/).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

_WORKSPACE = threading.local()


#: Shapes whose row-sum arrays one Python thread keeps (:func:`_row_sum_arrays`).
_WORKSPACE_SHAPES = 2


def _row_sum_arrays(P, H, n, d):
    """The intermediate row sums ``S0 (P, H, n), SX (P, H, n, d), SI, RS (P, H, n)`` of
    :func:`fused_pass`, kept between calls of one Python thread for the last
    :data:`_WORKSPACE_SHAPES` shapes (every slot is rewritten by each pass; never returned).
    Fresh arrays of this size cost their page faults at every call, most when calls
    alternate between two shapes (see benchmarks/)."""
    return _kept("row_sums", (P, H, n, d), lambda: RowSums(
        np.empty((P, H, n)), np.empty((P, H, n, d)), np.empty((P, H, n)), np.empty((P, H, n))))


def _kept(name, key, make):
    """The arrays ``make()`` of this Python thread's workspace ``name`` for ``key``, kept for
    the last :data:`_WORKSPACE_SHAPES` keys (most recent first)."""
    kept = getattr(_WORKSPACE, name, None)
    if kept is None:
        kept = []
        setattr(_WORKSPACE, name, kept)
    for k, ws in enumerate(kept):
        if ws[0] == key:
            kept.insert(0, kept.pop(k))
            return ws[1]
    ws = (key, make())
    kept.insert(0, ws)
    del kept[_WORKSPACE_SHAPES:]
    return ws[1]


class RowSums(NamedTuple):
    """The pair sums of every (path, head, row): S0, SI (Itô), RS (the row's shift)
    (P, H, n) and SX (P, H, n, d)."""

    S0: np.ndarray
    SX: np.ndarray
    SI: np.ndarray
    RS: np.ndarray


class Outputs(NamedTuple):
    """The arrays a pass writes, in the kernels' argument order."""

    vel: np.ndarray  # (P, n, d)
    part: np.ndarray  # (P, H, n)
    grad: np.ndarray  # (P, n, d)
    bhat: np.ndarray  # (P, n)
    er: np.ndarray  # (5, P, n) row terms of 𝒟, G², G²_hm, E, Itô
    dEp: np.ndarray  # (P, tiles, H, d, d) partial sums of ∂_D E
    energy: np.ndarray  # (P,)
    diss: np.ndarray  # (P,)
    G2: np.ndarray  # (P,)
    G2hm: np.ndarray  # (P,)
    ito: np.ndarray  # (P,)
    dEdD: np.ndarray  # (P, H, d, d)


def release() -> None:
    """Forget the arrays this Python thread keeps between passes (the next pass allocates
    them again, as the first pass of a process does)."""
    _WORKSPACE.__dict__.clear()
