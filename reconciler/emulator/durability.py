"""Group commit for the state file: a write is acknowledged only once a save that holds it is on disk.

A management request that changed the namespace (a rule added or removed, an entity created)
hands its response to :meth:`GroupCommit.after_commit` instead of sending it. The saver thread
snapshots the namespace, noting how many changes the snapshot holds, writes it atomically with
fsync (``reconciler.atomic_file``) and then releases, on the event loop, every response whose
change that snapshot holds. Requests that arrive during a save wait for the next one, so a burst
of writes costs one save, not one each. A process killed at any moment therefore restarts with
every acknowledged change, and nothing removed by an acknowledged request comes back.

Changes nobody waits for (messages, the in-process API) are saved too, after ``SAVE_DELAY``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from reconciler.emulator import state as persistence
from reconciler.emulator.namespace import Namespace

log = logging.getLogger("reconciler.emulator")

#: How long changes nobody waits for may wait before the state file is rewritten.
SAVE_DELAY = 0.2
#: How long to wait before retrying a save that failed (its responses wait too).
RETRY_DELAY = 1.0

Deliver = Callable[[list[Callable[[], None]]], None]


class GroupCommit:
    """Counts the namespace's changes and releases waiting responses once a save holds them."""

    def __init__(self, namespace: Namespace, path: Path, deliver: Deliver) -> None:
        """``deliver`` runs the released responses on the event loop (the saver is another thread)."""
        self._namespace = namespace
        self._path = path
        self._deliver = deliver
        self._cond = threading.Condition()
        self._changes = 0
        self._saved = 0
        self._waiting: list[tuple[int, Callable[[], None]]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        namespace.on_change(self._changed)

    @property
    def changes(self) -> int:
        """How many changes the namespace has had (a request compares it before and after)."""
        return self._changes

    def _changed(self) -> None:
        with self._cond:
            self._changes += 1
            self._cond.notify()

    def after_commit(self, respond: Callable[[], None]) -> None:
        """Run ``respond`` once every change made so far is on disk (at once if it already is)."""
        with self._cond:
            if self._saved >= self._changes:
                waiting = False
            else:
                self._waiting.append((self._changes, respond))
                self._cond.notify()
                waiting = True
        if not waiting:
            respond()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sbrules-emulator-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def save(self) -> None:
        """Write the namespace now and release the responses the file then holds."""
        with self._namespace.lock:
            held = self._changes
            doc = persistence.snapshot(self._namespace)
        try:
            persistence.write(doc, self._path)
        except OSError as exc:
            raise persistence.StateFileError(f"cannot write emulator state file {self._path}: {exc}") from None
        with self._cond:
            self._saved = max(self._saved, held)
            ready = [respond for change, respond in self._waiting if change <= held]
            self._waiting = [(change, respond) for change, respond in self._waiting if change > held]
        if ready:
            self._deliver(ready)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or self._saved < self._changes)
                if self._stopping:
                    return
                # Nobody waiting: let changes gather a moment; a response that starts waiting ends it.
                self._cond.wait_for(lambda: self._stopping or bool(self._waiting), SAVE_DELAY)
            try:
                self.save()
            except persistence.StateFileError as exc:
                log.error("emulator: %s", exc)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, RETRY_DELAY)
