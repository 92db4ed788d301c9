"""numba's on-disk cache, made aware of the whole kernel package.

numba keys the cache of a function by the source of its own file only: a cached kernel that
calls (and so links and inlines) compiled code of another module of this package would be
loaded unchanged after an edit of that module. :func:`install` puts a cache locator in front
of numba's own: for a function defined in this package it takes the locator numba would
have chosen and adds to its source stamp a digest of every module of the package, so an edit
anywhere in the package invalidates the cache of every kernel. Functions of other packages
keep numba's behaviour. The guard is installed when the package is imported, before any of
its kernels is defined.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from numba.core import caching

_PACKAGE = Path(__file__).resolve().parent


def _package_files():
    return sorted(_PACKAGE.glob("*.py"))


def package_digest():
    """SHA-256 of the package's modules (names and contents), recomputed when one of them
    changes on disk (its modification time or size)."""
    return _digest(tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                         for p in _package_files()))


@functools.lru_cache(maxsize=8)
def _digest(stamps):
    h = hashlib.sha256()
    for name, _, _ in stamps:
        h.update(name.encode())
        h.update((_PACKAGE / name).read_bytes())
    return h.hexdigest()


def _in_package(py_file):
    try:
        return Path(py_file).resolve().parent == _PACKAGE
    except (OSError, ValueError):  # pragma: no cover - a placeholder file name
        return False


class PackageLocator:
    """The cache locator of the package's functions: numba's own choice, with the package
    digest in its source stamp."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if not (os.path.exists(py_file) and _in_package(py_file)):
            return None
        for other in caching.CacheImpl._locator_classes:
            if other is cls:
                continue
            locator = other.from_function(py_func, py_file)
            if locator is not None:
                own = locator.get_source_stamp
                locator.get_source_stamp = lambda own=own: (own(), package_digest())
                return locator
        return None


def install():
    """Put :class:`PackageLocator` first in numba's list of cache locators (once)."""
    classes = caching.CacheImpl._locator_classes
    if PackageLocator not in classes:
        classes.insert(0, PackageLocator)


install()
