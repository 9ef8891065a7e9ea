"""Processes the tests start: each in a process group of its own, none outliving the test run.

``spawn`` starts a child in a new session (so its whole group, a Spark daemon's JVM included, can be
signalled at once) and asks the kernel to send it SIGTERM when the pytest process that started it
dies, however it dies (``PR_SET_PDEATHSIG``; it survives the ``exec`` of ``spark-class`` into its
JVM). ``end`` stops a group politely, then for good. The root conftest turns SIGTERM into an
interrupt, so fixture teardown runs; ``end_all`` runs at exit for whatever is left.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
from typing import Any, Callable

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_groups: set[int] = set()


def _die_with_parent() -> None:
    """In the child, between fork and exec: SIGTERM when the parent dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def spawn(args: Any, preexec_fn: Callable[[], None] | None = None, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` in a process group of its own that dies with this process
    (``preexec_fn``, if given, runs in the child too)."""

    def prepare() -> None:
        _die_with_parent()
        if preexec_fn is not None:
            preexec_fn()

    process = subprocess.Popen(args, start_new_session=True, preexec_fn=prepare, **kwargs)
    _groups.add(process.pid)
    return process


def end(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
    """Signal the process's group with ``sig``, wait up to ``timeout`` s, then SIGKILL it; its exit status."""
    try:
        if process.poll() is None:
            _signal_group(process.pid, sig)
            try:
                return process.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                return process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # the leader is gone; its group may not be
        return process.returncode
    finally:
        _groups.discard(process.pid)


def end_all() -> None:
    """SIGKILL every group still registered (at exit, or when the run is interrupted)."""
    for pid in list(_groups):
        _signal_group(pid, signal.SIGKILL)
        _groups.discard(pid)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


atexit.register(end_all)
