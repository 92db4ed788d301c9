r"""Embedded Runge–Kutta pairs: tableaux with error weights :math:`\hat b` [model §6d].

.. math::

    x' = R_x\Big(h\sum_i b_i K_i\Big), \qquad e = h\sum_i (b_i - \hat b_i) K_i ,

the solution of order p and the local error estimate of order :math:`\hat p + 1`. They are
registered tableaux (:func:`~wflow.stepping.integrators.register_tableau`): with a fixed step
they are run like every other tableau; under ``solver.adaptive`` the error controller of
:mod:`wflow.stepping.adaptive` uses :math:`\hat b`.
"""

from __future__ import annotations

from fractions import Fraction as _F

from wflow.stepping.integrators import ButcherTableau, register_tableau

__all__ = ["BS32", "DOPRI5", "TSIT5"]


def _f(*xs):
    return tuple(float(_F(x)) for x in xs)


#: Bogacki–Shampine 3(2): order 3, embedded order 2, four stages, first same as last.
BS32 = register_tableau(ButcherTableau(
    "bs32",
    (_f(0, 0, 0, 0), _f("1/2", 0, 0, 0), _f(0, "3/4", 0, 0), _f("2/9", "1/3", "4/9", 0)),
    _f("2/9", "1/3", "4/9", 0),
    _f(0, "1/2", "3/4", 1),
    3,
    b_hat=_f("7/24", "1/4", "1/3", "1/8"),
    order_hat=2,
), "Bogacki–Shampine")

_DP_B = ("35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0)

#: Dormand–Prince 5(4): order 5, embedded order 4, seven stages, first same as last.
DOPRI5 = register_tableau(ButcherTableau(
    "dopri5",
    (
        _f(0, 0, 0, 0, 0, 0, 0),
        _f("1/5", 0, 0, 0, 0, 0, 0),
        _f("3/40", "9/40", 0, 0, 0, 0, 0),
        _f("44/45", "-56/15", "32/9", 0, 0, 0, 0),
        _f("19372/6561", "-25360/2187", "64448/6561", "-212/729", 0, 0, 0),
        _f("9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656", 0, 0),
        _f(*_DP_B),
    ),
    _f(*_DP_B),
    _f(0, "1/5", "3/10", "4/5", "8/9", 1, 1),
    5,
    b_hat=_f("5179/57600", 0, "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"),
    order_hat=4,
), "Dormand–Prince")

_TS_B = (0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742,
         -3.290069515436081, 2.324710524099774, 0.0)
_TS_BTILDE = (-0.00178001105222577714, -0.0008164344596567469, 0.007880878010261995,
              -0.1447110071732629, 0.5823571654525552, -0.45808210592918697,
              0.015151515151515152)

#: Tsitouras 5(4) (decimal coefficients, as published): order 5, embedded order 4, seven
#: stages, first same as last; :math:`\hat b = b - \tilde b` from the published differences.
TSIT5 = register_tableau(ButcherTableau(
    "tsit5",
    (
        (0.0,) * 7,
        (0.161, 0, 0, 0, 0, 0, 0),
        (-0.008480655492356989, 0.335480655492357, 0, 0, 0, 0, 0),
        (2.897153057105493, -6.359448489975075, 4.3622954328695815, 0, 0, 0, 0),
        (5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525,
         0, 0, 0),
        (5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401,
         -0.028269050394068383, 0, 0),
        _TS_B,
    ),
    _TS_B,
    (0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0),
    5,
    b_hat=tuple(b - bt for b, bt in zip(_TS_B, _TS_BTILDE)),
    order_hat=4,
), "Tsitouras")
