"""Column tables in HDF5: one dataset per column (numbers or strings) and the column order in
an attribute; written under a temporary name renamed when complete. A sweep's summary
(``sweep_summary.h5``, :mod:`wflow.sweeps.summary`) is one."""

from __future__ import annotations

import json

import h5py
import numpy as np

from wflow.storage.files import replacing


def write_columns(path, cols, fmt):
    """Write the ordered columns ``cols`` (dict name -> list) to the HDF5 file ``path``.

    Parameters
    ----------
    path : path-like
        The file, replaced when complete.
    cols : dict of str to list
        One list per column, all of one length; a column of strings (or an empty one) is
        stored as variable-length strings, any other as a numeric array.
    fmt : str
        The ``format`` attribute of the file.
    """
    with replacing(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["format"] = fmt
        f.attrs["columns"] = json.dumps(list(cols))
        for k, v in cols.items():
            if v and isinstance(v[0], str) or not v:
                f.create_dataset(k, data=np.array(v, dtype=object), dtype=h5py.string_dtype())
            else:
                f.create_dataset(k, data=np.asarray(v))


def read_columns(path):
    """The columns of a file written by :func:`write_columns`.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    dict of str to list
        In the stored order; strings decoded.
    """
    with h5py.File(path, "r") as f:
        cols = {}
        for k in json.loads(f.attrs["columns"]):
            a = f[k][...]
            cols[k] = ([x.decode() if isinstance(x, bytes) else x for x in a.tolist()]
                       if a.dtype.kind == "O" else a.tolist())
    return cols
