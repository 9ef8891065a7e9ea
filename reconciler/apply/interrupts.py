"""What the subscriptions an apply runs in parallel watch between their steps: Ctrl-C (once: finish
what is in flight; twice: stop at once), --fail-fast, and the first wait for each other run's lock."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from reconciler.lock import LockRule
from reconciler.plan import TEMP_SUFFIX


class StoppedAtOnce(KeyboardInterrupt):
    """A second Ctrl-C: apply stopped before its next request, whatever it was in the middle of."""

    def __str__(self) -> str:
        return (
            "stopped at once: a rule replacement may have been left half-way, with its temporary rule "
            f"(a name ending in {TEMP_SUFFIX!r}) in place; the next `sbrules plan` or `sbrules apply` removes it. "
            "Subscriptions being written stay locked until another apply takes their locks over, or `sbrules unlock --all`"
        )


#: How often apply's main thread looks at the Ctrl-C count while its subscriptions run.
CTRL_C_POLL_SECONDS = 0.1


class CtrlC:
    """Ctrl-C while apply waits for its subscriptions, counted by a SIGINT handler, not raised.

    A KeyboardInterrupt lands wherever the main thread is, and in ``concurrent.futures.wait`` that
    may be between its acquiring of the futures' locks and their release: the main thread then
    holds a future's lock for good, the worker that finishes that future blocks on it, and the
    interpreter's exit joins that worker for ever (the command printed its error and never ended).
    The handler takes no lock and raises nothing; the waiting loop reads the count. Installed only
    on the main thread over Python's default handler (an ignored SIGINT stays ignored)."""

    def __init__(self) -> None:
        self.presses = 0
        self._previous: Any = None

    def _press(self, signum: int, frame: object) -> None:
        self.presses += 1

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._press)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@dataclass
class Signals:
    """What the subscriptions running in parallel watch between their steps."""

    #: --fail-fast: a subscription failed; start nothing new.
    fail_fast: threading.Event = field(default_factory=threading.Event)
    #: The first Ctrl-C: finish the change in flight, start nothing new.
    interrupted: threading.Event = field(default_factory=threading.Event)
    #: The second Ctrl-C: send no further request.
    abort: threading.Event = field(default_factory=threading.Event)
    #: Tells ``on_lock_wait`` of the first wait for each other run (its later waits say nothing more).
    on_lock_wait: Callable[[str], None] | None = None
    _told: set[str] = field(default_factory=set)
    _told_lock: threading.Lock = field(default_factory=threading.Lock)

    def waiting_for(self, line: str, lock: LockRule) -> None:
        with self._told_lock:
            if self.on_lock_wait is None or lock.run in self._told:
                return
            self._told.add(lock.run)
        self.on_lock_wait(line)
