"""The writer's side of a result file beside HDF5: disk reserved before each write (a full disk
fails before HDF5 touches the file) and the advisory lock on ``<file>.lock`` that keeps one
writer per file (see :mod:`wflow.storage.io`). Storage only."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from wflow.errors import ConfigError


def _reserve(path: Path, nbytes: int):
    """Allocate ``nbytes`` of disk past the end of ``path`` before HDF5 writes to it.

    HDF5 extends a file at its end; a write the disk refuses halfway leaves its metadata in
    an inconsistent state (the file no longer opens). With the space allocated first
    (``posix_fallocate``), a full disk is an ``OSError(ENOSPC)`` raised here, before anything
    is written: the file stays exactly as the last flush left it. HDF5 writes into the
    reserved space and trims what it did not use when the file is closed. A file system
    that cannot preallocate is written without the reservation.
    """
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        try:
            os.posix_fallocate(fd, size, int(nbytes))
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                return
            try:  # give back what a partial allocation took
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from None
    finally:
        os.close(fd)


def lock_holder(path) -> int | None:
    """The pid of the wflow process writing ``path`` (holding its ``<path>.lock``), or None.

    The lock file is only read and probed with a shared non-blocking ``flock`` for an instant
    (never created or removed); a writer taking the lock at that instant tries again.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        fd = os.open(f"{path}.lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _flock_briefly_retried(fd, fcntl):
    """``flock(LOCK_EX | LOCK_NB)``, tried again twice after a few milliseconds: a reader
    asking whether the file is live (:func:`lock_holder`) holds a shared lock for an instant."""
    for delay in (0.005, 0.05, None):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError:
            if delay is None:
                raise
            time.sleep(delay)


class _Lock:
    """Advisory exclusive lock on ``<path>.lock`` (no-op where fcntl is missing)."""

    def __init__(self, path: Path):
        self.path = Path(f"{path}.lock")
        self.fd = None

    def acquire(self, target: Path):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return self
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise ConfigError(f"{target}: cannot create the lock file {self.path} "
                                  f"({exc.strerror or type(exc).__name__})") from None
            try:
                _flock_briefly_retried(fd, fcntl)
            except OSError:
                try:
                    other = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                finally:
                    os.close(fd)
                raise FileExistsError(
                    f"{target} is being written by another wflow process (pid {other})"
                ) from None
            try:  # the previous holder may have unlinked the lock file meanwhile
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        else:  # pragma: no cover
            raise FileExistsError(f"{target}: cannot lock {self.path}")
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def lock_folder(folder, what="sweep") -> _Lock:
    """The advisory lock of a folder that one writer at a time fills (a sweep's output
    folder): ``<folder>/.wflow-<what>.lock``, released by :meth:`release` (or by the kernel
    when the process dies); another holder is a FileExistsError line naming the folder."""
    folder = Path(folder)
    try:
        return _Lock(folder / f".wflow-{what}").acquire(folder)
    except FileExistsError as exc:
        pid = str(exc).rsplit("(pid ", 1)[-1].rstrip(")") if "(pid " in str(exc) else "?"
        raise FileExistsError(f"{folder}: another wflow {what} (pid {pid}) is writing into this "
                              f"folder; wait for it to finish, or give another -o") from None
