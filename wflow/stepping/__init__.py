"""Token steppers behind one protocol (``registry.Stepper``; ``registry`` imports none of the
schemes): Butcher tableaux run by one retracted step (``integrators``), the JKO minimising
movement (``jko``), SSP Runge–Kutta of a density (``density``); each registers itself, and
the lines below import the built-in ones. They know nothing of attention:
a step sees a velocity field, an energy and a mobility. May import ``wflow.geometry`` and
``wflow.model`` (JKO's W₂ check)."""

# The built-in steppers register themselves on import (wflow.stepping.registry): one line each,
# in this order (the order of solver.method's allowed values).
# isort: off
from wflow.stepping import integrators  # noqa: E402, F401  euler, heun, rk4
from wflow.stepping import embedded  # noqa: E402, F401  bs32, dopri5, tsit5 (with error weights)
from wflow.stepping import density  # noqa: E402, F401  ssprk3 (and the density stepper)
from wflow.stepping import jko  # noqa: E402, F401  jko
from wflow.stepping import layernorm  # noqa: E402, F401  euler_unprojected (the post-LN block)
# isort: on
