"""Bottom layer: geometry of the sphere (``sphere``), the numba kernels (``_kernels``), the
worker threads that run them (``_pool``) and their plain NumPy twin (``_reference``). May
import numpy, numba, scipy and ``wflow.errors`` only; everything else in wflow builds on it."""
