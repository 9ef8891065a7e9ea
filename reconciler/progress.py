"""What a person waiting on a command should hear while it waits: one logger, which the CLI prints on stderr.

Two kinds of record go to ``reconciler.progress``: notices (a burst of retries, told by
:mod:`reconciler.namespace.pipeline`) and the phases of a long task (a traffic report: starting
Spark, reading the sample, evaluating the filters, writing the report). A :func:`task` gives its
phases a clock; :func:`phase` says a new one begins (and so that the previous one ended); the
task's end is told too, so that a terminal's live line can be finished. How all this looks is
the CLI's business (:mod:`reconciler.cli.progress`); every record's message is a complete plain
line (``reading 1,000 messages… (after 4.1 s)``), as ``-v`` and a log capture show it.
"""

from __future__ import annotations

import enum
import logging
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

log = logging.getLogger("reconciler.progress")
#: The record attribute that holds a :class:`Phase`.
PHASE = "progress_phase"


class Step(enum.Enum):
    BEGINS = "begins"  # a phase begins
    DONE = "done"  # the task finished
    STOPPED = "stopped"  # the task ended in an exception


@dataclass(frozen=True)
class Phase:
    """What a phase record carries besides its message, for a display that keeps its own clock."""

    step: Step
    #: what is being done ("evaluating 12 filters over 2 topics"); for an end, the last phase's
    text: str
    #: ``time.monotonic()`` when the task began
    started: float


@dataclass
class _Task:
    started: float
    current: str = ""


_task: ContextVar[_Task | None] = ContextVar("progress_task", default=None)


@contextmanager
def task() -> Iterator[None]:
    """A long run told in phases, timed from here. A task inside another is part of it: only the
    outermost tells its end ("done in 12.3 s", or "stopped after 9.1 s" when an exception leaves it)."""
    if _task.get() is not None:
        yield
        return
    state = _Task(time.monotonic())
    token = _task.set(state)
    finished = False
    try:
        yield
        finished = True
    finally:
        _task.reset(token)
        if state.current:  # a task that told no phase has no end to tell
            elapsed = time.monotonic() - state.started
            step, words = (Step.DONE, "done in") if finished else (Step.STOPPED, "stopped after")
            log.info("%s %.1f s", words, elapsed, extra={PHASE: Phase(step, state.current, state.started)})


def phase(text: str) -> None:
    """Tell that the current task's next phase begins (nothing outside a :func:`task`)."""
    state = _task.get()
    if state is None:
        return
    record = {PHASE: Phase(Step.BEGINS, text, state.started)}
    if state.current:
        log.info("%s… (after %.1f s)", text, time.monotonic() - state.started, extra=record)
    else:
        log.info("%s…", text, extra=record)
    state.current = text
