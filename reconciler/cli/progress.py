"""How the records of ``reconciler.progress`` look on stderr: plain lines, or a live line on a terminal.

Without a terminal (CI, a pipe, a file) every record is one line, as its message says it. On a
terminal the phase in progress is one line rewritten in place (carriage return, clear to the end
of the line) with a clock that keeps running; a notice (a retry) is printed above it, and the
task's end finishes it with a newline, before anything else is printed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

import click

from reconciler.progress import PHASE, Phase, Step

#: How often a live line's clock is redrawn, in seconds.
TICK = 0.1
_CLEAR = "\r\x1b[K"


class PlainLines(logging.Handler):
    """A record as one line on the stderr of the moment (click's, so that a test capturing it sees it)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(record.getMessage(), err=True)


class LiveLine(logging.Handler):
    """The phase in progress as one line of ``stream`` (a terminal) rewritten in place.

    ``stream`` is a terminal of its own rather than ``sys.stderr``: while the JVM starts, file
    descriptor 2 points at Spark's log (:func:`reconciler.traffic.spark.failures.jvm_output`), and the
    line must keep running on the terminal meanwhile."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._phase: Phase | None = None
        self._stop: threading.Event | None = None

    def emit(self, record: logging.LogRecord) -> None:  # called with self.lock held
        phase = getattr(record, PHASE, None)
        if not isinstance(phase, Phase):
            self._write(_CLEAR + record.getMessage() + "\n")
            self._draw()
        elif phase.step is Step.BEGINS:
            self._phase = phase
            self._draw()
            if self._stop is None:
                self._stop = threading.Event()
                threading.Thread(target=self._tick, args=(self._stop,), name="progress-line", daemon=True).start()
        else:
            if self._stop is not None:
                self._stop.set()
                self._stop = None
            self._phase = None
            elapsed = time.monotonic() - phase.started
            ending = "done in" if phase.step is Step.DONE else "stopped after"
            self._write(self._line(f"{phase.text}… {ending} {elapsed:.1f} s") + "\n")

    def close(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._stop is not None:
                self._stop.set()
                self._stop = None
            if self._phase is not None:
                self._write("\n")
                self._phase = None
        self.stream.close()
        super().close()

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(TICK):
            with self.lock:  # type: ignore[union-attr]
                if not stop.is_set():
                    self._draw()

    def _draw(self) -> None:
        if self._phase is not None:
            elapsed = time.monotonic() - self._phase.started
            self._write(self._line(f"{self._phase.text}… {elapsed:.1f} s"))

    def _line(self, text: str) -> str:
        """``text`` replacing the line, cut to the terminal's width: a line that wraps cannot be rewritten in place."""
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            width = 0
        return _CLEAR + text[: max(width or 80, 20) - 1]  # a terminal that does not know its width says 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing for
            pass


def stderr_handler() -> logging.Handler:
    """The handler for this process's stderr: a live line on a terminal (``TERM=dumb`` aside), else plain lines."""
    stderr = sys.stderr
    try:
        live = stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        live = False
    if not live:
        return PlainLines()
    terminal = os.fdopen(os.dup(stderr.fileno()), "w", encoding=stderr.encoding or "utf-8", errors="replace")
    return LiveLine(terminal)
