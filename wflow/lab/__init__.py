"""What researchers do with runs: analysis of result series (``analysis``), figures and
animations (``plotting``, ``animation``; the only matplotlib users), studies (``studies``),
sweeps serial or on Dask (``sweep``) and benchmarks (``bench``). May import every layer
below; only the CLI imports it."""
