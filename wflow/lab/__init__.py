"""The benchmarks (``bench``, ``contention``; ``wflow bench``), until they leave the package.
The studies, figures, analysis and sweeps are packages of their own (:mod:`wflow.studies`,
:mod:`wflow.figures`, :mod:`wflow.analysis`, :mod:`wflow.sweeps`)."""
