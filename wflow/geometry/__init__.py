"""Geometry (a bottom layer): the sphere (``sphere``) and the grids of the density PDE
(``circle_fv``, ``sphere_mesh``). May import numpy, scipy and ``wflow.errors`` only;
everything else in wflow builds on it (the numba kernels are :mod:`wflow.kernels`)."""
