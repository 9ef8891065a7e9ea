"""Replace a file atomically: a reader, or the next run after a crash, sees the old file or the new
one, never half of one.

The new content goes to a temporary file in the target's directory (a rename is atomic only
within one file system), is flushed to disk, renamed over the target, and the directory is
flushed so the rename itself survives a power cut. The file gets the mode a plain ``open`` would
give it (the target's own, or 0666 less the umask), not the temporary file's private 0600.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write the new ``target`` to; it replaces ``target`` when the block ends.

    For writers that want a path (Parquet, say). If the block raises, ``target`` is untouched and
    the temporary file is removed.
    """
    target = Path(target)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, _mode_for(target))
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync(tmp, os.O_RDONLY)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def write_atomically(target: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``target`` with ``data`` (text is written as UTF-8)."""
    with replacing(target) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mode_for(target: Path) -> int:
    """The mode ``target`` keeps when it exists, else what a new file gets under the umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@functools.cache
def _umask() -> int:
    """The process's umask (read once: os.umask can only be read by setting it)."""
    current = os.umask(0o022)
    os.umask(current)
    return current
