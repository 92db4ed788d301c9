r"""The non-uniform FFTs of the spectral summation [model §2s].

.. math::
    \text{type 1:}\quad F_k = \sum_j c_j\, e^{\pm i\langle k, t_j\rangle},\qquad
    \text{type 2:}\quad f(t_i) = \sum_k F_k\, e^{\pm i\langle k, t_i\rangle},

over the modes :math:`k \in \{-L,\dots,L\}^m`, m = 1 (angles on :math:`S^1`) or m = 2 (the
polar and azimuthal angles of the double Fourier sphere on :math:`S^2`).

wflow's own transforms (:mod:`wflow.kernels.nufft_es`): the exponential-of-semicircle kernel of
width 16 on a twice upsampled grid, spreading and interpolation in numba, the uniform FFTs by
``scipy.fft``: permissive code only (numba BSD-2-Clause, SciPy and its pocketfft BSD-3-Clause).

*The same bits every time.* A call is single-threaded, visits the points in an order that
depends on the points only and runs its FFTs on one worker: it returns the same bits for the same
input, whatever else runs. The callers split their work into items of a size fixed by the data
(never by the thread count) and add item results in a fixed order.
"""

from __future__ import annotations

import numpy as np

from wflow.kernels import nufft_es as _es

__all__ = ["EPS", "W", "WIDTHS", "type1", "type2", "upsample", "mode_error"]

#: the transforms' relative ℓ² precision, apart from the conditioning of the sums in the angles
#: (about u·L·max|t|/π for angles t in [-π, 3π), in the indicator's round-off term): the largest
#: error measured against direct sums at degree ≤ 5 is 2.1e-15 (tests/test_nufft.py), with a
#: margin of 5
EPS = 1e-14
#: the kernel width of the transforms (type 1 always; type 2 by default)
W = _es.W
#: the widths a type-2 transform may take
WIDTHS = _es.WIDTHS


def type1(points, c, L, isign):
    r""":math:`F_k = \sum_j c_j e^{i\,\mathrm{isign}\langle k, t_j\rangle}`, :math:`|k_a| \le L`.

    Parameters
    ----------
    points : tuple of m arrays (n,) (the angles t_j, in [-π, 3π)).
    c : (K, n) complex strengths (K transforms on the same points).
    L : the largest mode.
    isign : +1 or -1.

    Returns
    -------
    (K, 2L+1) or (K, 2L+1, 2L+1) complex array, modes from -L to L along each axis.
    """
    return _es.type1(points, c, int(L), int(isign))


def upsample(F, isign, w=W):
    r"""The part of :func:`type2` shared by every set of points: F (K, 2L+1[, 2L+1]) deconvolved
    and transformed to the fine grid of the kernel of width w. Pass it to :func:`type2` in place
    of F to synthesise the same coefficients at several blocks of points (same bits as passing
    F)."""
    return _es.upsample(F, int(isign), int(w))


def mode_error(N, w=W):
    r"""The per-mode error :math:`e_k` (k = -L..L, N = 2L + 1) of a type-2 transform with the
    kernel of width w (:func:`wflow.kernels.nufft_es.mode_error`): the synthesis of F errs by
    at most :math:`\sum_k\lvert F_k\rvert e_k` per axis, apart from the round-off."""
    return _es.mode_error(int(N), int(w))


def type2(points, F, isign, w=W):
    r""":math:`f_i = \sum_k F_k e^{i\,\mathrm{isign}\langle k, t_i\rangle}` at the points.

    Parameters
    ----------
    points : tuple of m arrays (n,).
    F : (K, 2L+1) or (K, 2L+1, 2L+1) complex coefficients (modes -L..L), or :func:`upsample`
        of them with the same isign.
    isign : +1 or -1.
    w : the kernel width (:data:`WIDTHS`; the error per mode :func:`mode_error`); an upsampled
        F carries its own.

    Returns
    -------
    (K, n) complex array.
    """
    if not isinstance(F, _es.Upsampled):
        F = np.asarray(F, dtype=np.complex128)
    return _es.type2(points, F, int(isign), int(w))
