"""Writing files safely: a temporary name in the same folder, renamed when complete, and OS
errors turned into one line naming the file.

Every writer of wflow (figures, animations, summaries, result files) goes through
:func:`replacing` or :func:`write_error`, so that

* a failure never leaves a half-written file under its final name (the temporary is removed);
* a location the user gave that cannot be used (no permission, not a folder, read-only) is a
  :class:`~wflow.errors.ConfigError` (bad input, exit code 2);
* a failure of the machine mid-write (no space left, an I/O error) is a
  :class:`~wflow.errors.WriteError` (exit code 1).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

from wflow.errors import ConfigError, WriteError

__all__ = ["replacing", "write_error", "errno_of", "check_folder", "USER_ERRNOS"]

#: errors of a location the user chose (exit code 2); any other OS error is the machine's (1)
USER_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR,
                         errno.ENOENT, errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST})

_HDF5_ERRNO = re.compile(r"errno = (\d+)")


def errno_of(exc) -> int | None:
    """The errno of an OS error; HDF5 errors raised by h5py carry it in their message
    (``errno = 28``) when the OS refused a write."""
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        return exc.errno
    m = _HDF5_ERRNO.search(str(exc))
    return int(m.group(1)) if m else None


def write_error(path, exc, hint: str = "") -> ConfigError | WriteError:
    """The one-line error for ``exc`` raised while ``path`` was written: a
    :class:`ConfigError` for a location that cannot be used, else a :class:`WriteError`.

    Parameters
    ----------
    path : path-like or None
        The file being written (its final name); None when unknown.
    exc : BaseException
        The OS (or HDF5) error.
    hint : str
        What the user can do, appended after a semicolon.

    Returns
    -------
    ConfigError or WriteError
        To be raised (``raise write_error(...) from None``).
    """
    code = errno_of(exc)
    if code is not None:
        why = os.strerror(code)
    else:
        why = (str(exc).splitlines() or [""])[0].strip() or type(exc).__name__
    where = "" if path is None else f"{path}: "
    msg = f"{where}cannot write ({why})" + (f"; {hint}" if hint else "")
    return ConfigError(msg) if code in USER_ERRNOS else WriteError(msg)


def check_folder(folder) -> None:
    """Raise a one-line :class:`ConfigError` when files cannot be written into ``folder``:
    it, or a missing parent of it, cannot be created (``/proc/new``), or it cannot be written
    (read-only). Leaves nothing behind: the folders it creates to find out are removed.

    Parameters
    ----------
    folder : path-like
    """
    import tempfile

    folder = Path(folder)
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    try:
        for m in reversed(missing):
            try:
                m.mkdir()
            except OSError as exc:
                why = exc.strerror or type(exc).__name__
                raise ConfigError(f"{folder}: cannot create the output directory "
                                  f"({why if m == folder else f'{m}: {why}'})") from None
            made.append(m)
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            raise ConfigError(f"{folder}: cannot write to the output directory "
                              f"({exc.strerror or type(exc).__name__})") from None
    finally:
        for m in reversed(made):
            with contextlib.suppress(OSError):
                m.rmdir()


def _temporary(path: Path) -> Path:
    # the suffix stays last: matplotlib, Pillow and ffmpeg choose the format by it
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


@contextlib.contextmanager
def replacing(path, sync: bool = True):
    """Write ``path`` through a temporary name in the same folder.

    ``with replacing(out) as tmp:`` yields the temporary path (same suffix); when the block
    ends without an error the temporary is flushed to disk and renamed to ``out``
    (:func:`os.replace`, atomic); on any error it is removed and ``out`` is left as it was.
    OS errors become one line naming ``out`` (:func:`write_error`).

    Parameters
    ----------
    path : path-like
        The final name.
    sync : bool
        ``fsync`` the temporary before the rename (its data are on disk when the name
        appears).

    Yields
    ------
    Path
        The temporary name to write to.
    """
    path = Path(path)
    tmp = _temporary(path)
    try:
        yield tmp
        if sync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) or (isinstance(exc, RuntimeError)
                                        and errno_of(exc) is not None):
            raise write_error(path, exc) from None
        raise
