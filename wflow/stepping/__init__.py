"""Token steppers behind one protocol (``integrators.Stepper``): Butcher tableaux run by one
retracted step, and the JKO minimising movement (``jko``). They know nothing of attention:
a step sees a velocity field, an energy and a mobility. May import ``wflow.core`` and
``wflow.model`` (JKO's W₂ check)."""
