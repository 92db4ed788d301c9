"""Token steppers behind one protocol (``registry.Stepper``): Butcher tableaux run by one
retracted step, and the JKO minimising movement (``jko``). They know nothing of attention:
a step sees a velocity field, an energy and a mobility. May import ``wflow.core`` and
``wflow.model`` (JKO's W₂ check)."""

# The built-in steppers register themselves on import (wflow.stepping.registry): one line each.
from wflow.stepping import (
    density,  # noqa: E402, F401  ssprk3 (and the density stepper)
    integrators,  # noqa: E402, F401  euler, heun, rk4
    jko,  # noqa: E402, F401  jko
)
