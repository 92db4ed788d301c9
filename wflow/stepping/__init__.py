"""Token steppers behind one protocol (``registry.Stepper``; ``registry`` imports none of the
schemes): Butcher tableaux run by one retracted step (``integrators``), embedded pairs
(``embedded``) and their adaptive loop (``adaptive``), the JKO minimising movement (``jko``),
SSP Runge–Kutta of a density (``density``), the layer-norm placements (``layernorm``) and token
noise (``noise``); each registers itself, and the lines below import the built-in ones. The
features these modules implement declare their configuration keys there
(:func:`wflow.params.declare`). They know nothing of attention: a step sees a velocity field,
an energy and a mobility. May import ``wflow.geometry`` and ``wflow.model``."""

# The built-in steppers register themselves on import (wflow.stepping.registry): one line each,
# in this order (the order of solver.method's allowed values).
# isort: off
from wflow.stepping import integrators  # noqa: E402, F401  euler, heun, rk4
from wflow.stepping import embedded  # noqa: E402, F401  bs32, dopri5, tsit5 (with error weights)
from wflow.stepping import density  # noqa: E402, F401  ssprk3 (and the density stepper)
from wflow.stepping import jko  # noqa: E402, F401  jko
from wflow.stepping import layernorm  # noqa: E402, F401  euler_unprojected (the post-LN block)
# isort: on
from wflow.stepping import (
    adaptive,  # noqa: E402, F401  solver.adaptive and its keys
    noise,  # noqa: E402, F401  model.diffusion (token noise)
)
