"""A send guard is asked right before each attempt goes out: no retry and no paced request leaves
once it refuses (apply's lock lease), and what was never sent is told apart from what may have landed."""

from __future__ import annotations

import pytest

from reconciler.namespace.errors import ConnectionLostError, NotSentError, outcome_unknown
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.pipeline import Call, Request, RequestPipeline, Response, send_guard
from reconciler.namespace.retry import RetryPolicy

pytestmark = pytest.mark.unit


class Transport:
    """Answers each request at once: the first ``drop`` of them with a dropped connection."""

    def __init__(self, drop: int = 0) -> None:
        self.sent: list[str] = []
        self.drop = drop

    def submit(self, request: Request) -> None:
        self.sent.append(request.operation)
        if len(self.sent) <= self.drop:
            request.finish(error=ConnectionLostError("dropped"))
        else:
            request.finish(Response(200, None, None, "done", {}))

    def forget(self, request: Request) -> bool:
        return False

    def close(self) -> None:
        pass


def _call() -> Call:
    return Call("t/Subscriptions/s", "com.microsoft:add-rule", {})


def test_requests_go_while_the_guard_allows_them_and_none_after():
    transport = Transport()
    pipeline = RequestPipeline(transport, retry=RetryPolicy(backoff=0.001))
    lapsed = False
    with send_guard(lambda: "the lease lapsed" if lapsed else None):
        assert pipeline.call(_call()).body == "done"
        lapsed = True
        with pytest.raises(NotSentError, match="not sent: the lease lapsed") as caught:
            pipeline.call(_call())
    assert len(transport.sent) == 1 and not outcome_unknown(caught.value)  # never sent: nothing took effect
    assert pipeline.call(_call()).body == "done"  # outside the guard's context, requests go again


def test_a_retry_the_guard_refuses_is_not_sent_and_its_first_attempt_stays_unknown():
    transport = Transport(drop=1)
    pipeline = RequestPipeline(transport, retry=RetryPolicy(backoff=0.001), pacer=Pacer(window=1), timeout=0.5)
    asked = []

    def guard() -> str | None:
        asked.append(True)
        return "the lease lapsed" if len(asked) > 1 else None

    with send_guard(guard), pytest.raises(NotSentError) as caught:
        pipeline.call(_call())
    assert transport.sent == ["com.microsoft:add-rule"]  # the retry never went out
    assert outcome_unknown(caught.value)  # the first attempt's answer never came: it may have landed
    assert pipeline.call(_call()).body == "done"  # the refused attempt's slot (the only one) was given back
