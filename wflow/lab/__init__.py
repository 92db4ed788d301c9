"""What researchers do with runs: analysis of result series (``analysis``), figures and
animations (``plotting``, ``animation``; the only matplotlib users), studies (``studies``)
and sweeps serial or on Dask (``sweep``). May import every layer
below; only the CLI imports it."""
