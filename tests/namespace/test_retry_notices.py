"""Nothing long runs silently: retries that last more than a second say so on stderr, and a call
that gives up names its attempts as well as its timeout."""

from __future__ import annotations

import logging

import pytest

from reconciler.namespace.errors import ConnectionLostError, OperationTimeoutError, ServerBusyError
from reconciler.namespace.pipeline import Call, Request, RequestPipeline, RetryBurst
from reconciler.namespace.retry import RetryPolicy

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_told_once_it_lasts_a_second_then_at_most_once_a_second(caplog):
    clock = Clock()
    burst = RetryBurst(clock)
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        for step in range(12):  # a retry every 0.25 s for 3 s
            clock.now = step * 0.25
            burst.retrying(ConnectionLostError("dropped"), step + 1, 20)
        clock.now = 3.5
        burst.answered()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "connection lost, retrying (attempt 6 of 20)…",  # at 1.0 s
        "connection lost, retrying (attempt 10 of 20)…",  # at 2.0 s
        "answers are coming again after 3.5s of retries",
    ]


def test_a_short_burst_says_nothing(caplog):
    clock = Clock()
    burst = RetryBurst(clock)
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        burst.retrying(ServerBusyError("busy"), 1, 21)
        clock.now = 0.5
        burst.retrying(ServerBusyError("busy"), 2, 21)
        burst.answered()
    assert caplog.records == []


class Failing:
    """A transport whose every request times out at once."""

    def submit(self, request: Request) -> None:
        request.finish(error=OperationTimeoutError("enumerate-rules on t/Subscriptions/s: no response within 2s"))

    def forget(self, request: Request) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_call_that_gives_up_names_its_timeout_and_its_attempts():
    pipeline = RequestPipeline(Failing(), retry=RetryPolicy(retries=2, backoff=0.001), timeout=2)
    with pytest.raises(OperationTimeoutError) as info:
        pipeline.call(Call("t/Subscriptions/s", "com.microsoft:enumerate-rules", {}))
    assert str(info.value) == "enumerate-rules on t/Subscriptions/s: no response within 2s (gave up after 3 attempts)"


def test_the_cli_prints_progress_lines_on_stderr_without_v(capsys):
    from reconciler.cli import configure_logging

    configure_logging(False)
    logging.getLogger("reconciler.progress").warning("connection lost, retrying (attempt 2 of 6)…")
    assert capsys.readouterr().err == "connection lost, retrying (attempt 2 of 6)…\n"
