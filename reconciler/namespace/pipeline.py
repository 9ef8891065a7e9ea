"""The request pipeline under the typed operations: pacing, the one retry policy, completions.

After the Azure SDK for Python's layering: a *transport* moves one request and reports its answer
(``reconciler.amqp.engine.Engine``, the HTTP transport of ``reconciler.rest``); this pipeline decides when
each request may go (``pacing.Pacer``: the in-flight window and the rate), whether and when a
failed one goes again (``retry.RetryPolicy``), and hands finished requests back to the calling
thread in batches. The typed operations above (``amqp/client.py``, ``rest/client.py``) build requests
and read responses; they never loop, wait or retry themselves.

A batch (``call_all``) is pipelined from the calling thread alone, which costs far less than a
thread per request; ``call`` is a batch of one, so many threads may call at once and share the
pacer. Every attempt of every request can be reported to an ``on_attempt`` callback (apply
journals them). A caller that may send only while a condition holds (apply, while its lock's
lease lasts) sets a ``send_guard``: it is asked right before each attempt goes out, after any
pacing wait, so no retry and no paced request leaves once the condition is gone.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from reconciler.namespace.credits import THROTTLED_CONDITION, wait_hint
from reconciler.namespace.errors import (
    ConnectionLostError,
    ManagementError,
    NotSentError,
    OperationTimeoutError,
    ServerBusyError,
    error_for,
)
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.retry import RetryPolicy
from reconciler.progress import log as progress

log = logging.getLogger("reconciler.amqp")

#: Asked before each attempt this context sends: None lets it go, a reason stops it (NotSentError).
SendGuard = Callable[[], str | None]
_guard: ContextVar[SendGuard | None] = ContextVar("send_guard", default=None)


@contextmanager
def send_guard(guard: SendGuard) -> Iterator[None]:
    """Requests made from this context (this thread) go out only while ``guard`` returns None."""
    token = _guard.set(guard)
    try:
        yield
    finally:
        _guard.reset(token)
#: A run of retries is told on ``progress`` once it has lasted this long.
QUIET_SECONDS = 1.0


class RetryBurst:
    """Retries in a row, told once they have lasted ``QUIET_SECONDS`` ("connection lost, retrying
    (attempt 2 of 6)…") and again at most once a second, and the recovery after them: a command
    that waits on retries never looks stuck. A burst ends at the next answer that is not a retry."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._last_told: float | None = None

    def retrying(self, exc: ManagementError, attempt: int, attempts: int) -> None:
        now = self._clock()
        with self._lock:
            if self._started is None:
                self._started = now
            if now - self._started < QUIET_SECONDS or (self._last_told is not None and now - self._last_told < 1.0):
                return
            self._last_told = now
        progress.warning("%s, retrying (attempt %d of %d)…", _why(exc), attempt + 1, attempts)

    def answered(self) -> None:
        with self._lock:
            told, started = self._last_told is not None, self._started
            self._started = self._last_told = None
        if told and started is not None:
            progress.warning("answers are coming again after %.1fs of retries", self._clock() - started)


def _why(exc: ManagementError) -> str:
    """A retried failure in a few words."""
    if isinstance(exc, ServerBusyError):
        return "the namespace is throttling requests"
    if isinstance(exc, OperationTimeoutError):
        return "no answer in time"
    if isinstance(exc, ConnectionLostError):
        return "connection lost"
    return f"the service failed a request ({type(exc).__name__})"

#: NET2 treats these as "nothing there" for reads rather than failures.
_EMPTY_CONDITIONS = {"com.microsoft:message-not-found", "com.microsoft:session-not-found"}

#: Request ids are a random per-process prefix and a counter, as AMQPNET builds message ids:
#: unique without a uuid4 (an os.urandom call and a UUID object) per request.
_ID_PREFIX = f"{uuid.uuid4().hex}-"
_numbers = itertools.count(1)


def next_message_id() -> str:
    return f"{_ID_PREFIX}{next(_numbers)}"


@dataclass
class Response:
    """An answer as received: status, its description and condition, body, and the raw properties."""

    status: int | None
    description: str | None
    condition: str | None
    body: Any
    properties: dict[str, Any]


@dataclass(eq=False)
class Request:
    """One attempt in flight; the transport fills ``response`` or ``error``, sets ``done`` and calls
    ``on_done`` (from its own thread)."""

    entity: str
    operation: str
    body: Any
    timeout: float
    on_done: Callable[["Request"], None] | None = None
    context: str = ""  # how errors name it ("list topics", "peek-message on orders/Subscriptions/all")
    message_id: str = field(default_factory=next_message_id)
    done: bool = False
    response: Response | None = None
    error: ManagementError | None = None

    def finish(self, response: Response | None = None, error: ManagementError | None = None) -> None:
        if not self.done:
            self.response, self.error = response, error
            self.done = True
            if self.on_done is not None:
                self.on_done(self)


class RequestTransport(Protocol):
    """Moves requests: ``submit`` hands one over (its answer comes through ``Request.finish``)."""

    def submit(self, request: Request) -> None: ...

    def forget(self, request: Request) -> bool:
        """Stop waiting for ``request``; False when its answer is already being delivered."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Call:
    """One request to make: where, what, and the credits the service will charge for it.

    ``charged`` reads the actual charge off a successful answer when it depends on it (a peek is
    charged per message returned, not per message asked for).
    """

    entity: str
    operation: str
    body: Any
    credits: int = 0
    charged: Callable[[Response], int] | None = None
    what: str | None = None

    @property
    def context(self) -> str:
        """How errors name this call: ``enumerate-rules on orders/Subscriptions/billing``."""
        return self.what or f"{self.operation.removeprefix('com.microsoft:')} on {self.entity}"


@dataclass(frozen=True)
class Attempt:
    """One try of one call, as it happened (what apply's journal records for every request)."""

    call: Call
    number: int
    outcome: str  # "ok", "retry" or "error" (the last attempt failed for good)
    ms: float  # submitted → answered (or given up)
    queued_ms: float  # waiting for the pacer before it was submitted
    error: ManagementError | None = None
    throttled: bool = False
    wait_hint: float | None = None  # the service's "please wait N seconds", when it gave one
    retry_in: float | None = None  # seconds until the next attempt

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "attempt": self.number,
            "outcome": self.outcome,
            "ms": round(self.ms, 1),
        }
        if self.queued_ms >= 0.05:
            entry["queued_ms"] = round(self.queued_ms, 1)
        if self.error is not None:
            entry["error"] = str(self.error)
            if self.error.status is not None:
                entry["status"] = self.error.status
        if self.throttled:
            entry["throttled"] = True
        if self.wait_hint is not None:
            entry["wait_hint_s"] = self.wait_hint
        if self.retry_in is not None:
            entry["retry_in_s"] = round(self.retry_in, 3)
        return entry


OnAttempt = Callable[[Attempt], None]


class Completions:
    """Finished requests of one batch, handed from the transport's thread to the thread running it.

    The transport wakes that thread once ``wanted`` responses are in, not at every response: waking
    it per response made the two threads trade the GIL at each one, a tenth of a batch's time. The
    wait for more than one is short (``GRACE``), so a batch with stragglers is not held up.
    """

    GRACE = 0.005

    def __init__(self) -> None:
        self._items: deque[tuple[int, Request]] = deque()
        self._enough = threading.Event()
        self._wanted = 1

    def add(self, index: int, request: Request) -> None:
        """Transport thread: one call has finished."""
        self._items.append((index, request))
        if len(self._items) >= self._wanted and not self._enough.is_set():
            self._enough.set()

    def take(self, wanted: int, timeout: float) -> list[tuple[int, Request]]:
        """Every finished call, once ``wanted`` are in (or one, after ``GRACE``); [] after ``timeout``."""
        if wanted > 1:
            self._wanted = wanted
            self._enough.clear()
            if len(self._items) >= wanted or self._enough.wait(min(timeout, self.GRACE)):
                return self._drain()
            timeout = max(0.0, timeout - self.GRACE)
        self._wanted = 1
        self._enough.clear()
        if not self._items:
            self._enough.wait(timeout)
        return self._drain()

    def _drain(self) -> list[tuple[int, Request]]:
        items = []
        while self._items:
            items.append(self._items.popleft())
        return items


def throttle_signal(request: Request) -> tuple[bool, float | None]:
    """Whether an answered request was throttled (server busy), and the service's wait hint."""
    if isinstance(request.error, ServerBusyError):
        return True, request.error.retry_after
    response = request.response
    condition = (response.condition or "").lower() if response is not None else ""
    if response is not None and (response.status == 503 or condition == THROTTLED_CONDITION):
        return True, wait_hint(response.description)
    return False, None


@dataclass
class _Tries:
    """The attempts of one call so far."""

    number: int = 0
    throttled: int = 0
    queued_since: float = 0.0


@dataclass
class _InFlight:
    request: Request
    deadline: float
    sent: float
    queued: float


class RequestPipeline:
    """Paces, sends, retries and collects requests over one transport."""

    def __init__(
        self,
        transport: RequestTransport,
        *,
        retry: RetryPolicy | None = None,
        pacer: Pacer | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.transport = transport
        self.retry = retry or RetryPolicy()
        self.pacer = pacer or Pacer()
        self.timeout = timeout
        self._burst = RetryBurst(self.pacer.clock)

    def close(self) -> None:
        self.transport.close()

    def call(
        self,
        call: Call,
        *,
        ok: Iterable[int] = (200,),
        empty_ok: bool = False,
        timeout: float | None = None,
        on_attempt: OnAttempt | None = None,
    ) -> Response:
        """Make one call with retries; its response when the status is in ``ok``, else its error raised.

        ``empty_ok`` turns 204 and 404 message/session-not-found into an empty (204) response.
        """
        result = self.call_all([call], ok=ok, empty_ok=empty_ok, window=1, timeout=timeout, on_attempt=on_attempt)[0]
        if isinstance(result, ManagementError):
            raise result
        return result

    def call_all(
        self,
        calls: Sequence[Call],
        *,
        ok: Iterable[int] = (200,),
        empty_ok: bool = False,
        window: int | None = None,
        timeout: float | None = None,
        on_attempt: OnAttempt | None = None,
    ) -> list[Response | ManagementError]:
        """Pipeline ``calls`` from this thread, at most ``window`` of them in flight; one result per call, in order.

        Each call is retried as the retry policy says; a call that fails for good yields its error
        instead of a response, so one failure does not hide the others.
        """
        ok, timeout = tuple(ok), timeout or self.timeout
        pacer, clock = self.pacer, self.pacer.clock
        guard = _guard.get()
        window = max(1, window or pacer.max_window)
        results: list[Response | ManagementError | None] = [None] * len(calls)
        tries = [_Tries(queued_since=clock()) for _ in calls]
        ready = deque(range(len(calls)))
        retries: list[tuple[float, int]] = []  # (due, index) heap
        in_flight: dict[int, _InFlight] = {}
        finished = Completions()
        while ready or retries or in_flight:
            now = clock()
            while retries and retries[0][0] <= now:
                index = heapq.heappop(retries)[1]
                tries[index].queued_since = now
                ready.append(index)
            paced_until = float("inf")
            while ready and len(in_flight) < window:
                index = ready[0]
                call = calls[index]
                if in_flight:
                    delay = pacer.try_acquire(call.credits)
                    if delay:  # our own answers (or the pacer's clock) will let it go later
                        paced_until = clock() + delay
                        break
                elif not pacer.acquire(call.credits, timeout):  # nothing of ours to wait for: block
                    ready.popleft()
                    results[index] = OperationTimeoutError(f"{call.context}: no free request slot within {timeout:g}s")
                    continue
                ready.popleft()
                refused = guard() if guard is not None else None
                if refused is not None:
                    pacer.release(call.credits, 0)
                    stopped = NotSentError(f"{call.context}: not sent: {refused}")
                    stopped.after_retry = tries[index].number > 0  # an earlier attempt may have landed
                    results[index] = stopped
                    continue
                self._submit(index, call, tries[index], timeout, in_flight, finished)
            if not in_flight and not retries:
                continue  # every ready call failed to get a slot: nothing left to wait for
            # Deadlines grow in submission order, so the oldest call in flight times out first.
            oldest = [flight.deadline for flight in itertools.islice(in_flight.values(), 1)]
            wake = min(oldest + [due for due, _ in retries[:1]] + [paced_until])
            wanted = max(1, min(len(in_flight), window // 8))
            arrived = finished.take(wanted, max(0.0, wake - clock()))
            if arrived:
                done = [i for i, request in arrived if i in in_flight and in_flight[i].request is request]
            else:
                now = clock()
                done = [i for i, flight in in_flight.items() if flight.deadline <= now]
            for index in done:
                flight = in_flight.pop(index)
                request = flight.request
                if not request.done and self.transport.forget(request):
                    pacer.release(calls[index].credits, calls[index].credits)  # no answer will release it
                self._settle(index, calls, flight, tries[index], ok, empty_ok, timeout, results, retries, on_attempt)
        filled = [result for result in results if result is not None]
        assert len(filled) == len(results), "every call has its result when nothing is ready, retrying or in flight"
        return filled

    def _submit(
        self, index: int, call: Call, tried: _Tries, timeout: float, in_flight: dict[int, _InFlight],
        finished: Completions,
    ) -> None:
        pacer = self.pacer
        now = pacer.clock()

        def answered(request: Request) -> None:  # the transport's thread
            throttled, hint = throttle_signal(request)
            charged = 0 if throttled else call.credits
            if not throttled and call.charged is not None and request.response is not None:
                charged = call.charged(request.response)
            pacer.release(call.credits, charged, throttled=throttled, hint=hint, sent=now)
            finished.add(index, request)

        tried.number += 1
        request = Request(call.entity, call.operation, call.body, timeout, answered, call.context)
        in_flight[index] = _InFlight(request, now + timeout, now, now - tried.queued_since)
        self.transport.submit(request)

    def _settle(
        self,
        index: int,
        calls: Sequence[Call],
        flight: _InFlight,
        tried: _Tries,
        ok: tuple[int, ...],
        empty_ok: bool,
        timeout: float,
        results: list[Response | ManagementError | None],
        retries: list[tuple[float, int]],
        on_attempt: OnAttempt | None,
    ) -> None:
        """Record one finished (or timed-out) attempt: its result, or when it goes again."""
        call = calls[index]
        ms = (self.pacer.clock() - flight.sent) * 1000
        throttled, hint = throttle_signal(flight.request) if flight.request.done else (False, None)
        try:
            results[index] = outcome(flight.request, call, ok, timeout, empty_ok)
        except ManagementError as exc:
            # The error decides, whatever its answer looked like: a throttled retry is counted as one.
            tried.throttled += isinstance(exc, ServerBusyError)
            delay = self.retry.next_delay(exc, tried.number, tried.throttled)
            if delay is None:
                exc.after_retry = tried.number > 1
                if exc.transient and tried.number > 1:  # a timeout names the attempts as well as the timeout
                    exc.args = (f"{exc} (gave up after {tried.number} attempts)", *exc.args[1:])
                results[index] = exc
                report = Attempt(call, tried.number, "error", ms, flight.queued * 1000, exc, throttled, hint)
            else:
                log.info("%s failed (%s); retry %d in %.2fs", call.context, type(exc).__name__, tried.number, delay)
                heapq.heappush(retries, (self.pacer.clock() + delay, index))
                report = Attempt(call, tried.number, "retry", ms, flight.queued * 1000, exc, throttled, hint, delay)
                self._burst.retrying(exc, tried.number, self.retry.attempts(exc))
        else:
            report = Attempt(call, tried.number, "ok", ms, flight.queued * 1000)
            self._burst.answered()
        if on_attempt is not None:
            on_attempt(report)


def outcome(request: Request, call: Call, ok: tuple[int, ...], timeout: float, empty_ok: bool) -> Response:
    """The response of a finished request, or the error it stands for (a timeout if unfinished)."""
    if not request.done:
        raise OperationTimeoutError(f"{call.context}: no response within {timeout:g}s")
    if request.error is not None:
        raise request.error
    response = request.response
    assert response is not None
    if response.status in ok:
        return response
    if empty_ok and (response.status == 204 or (response.status == 404 and response.condition in _EMPTY_CONDITIONS)):
        return Response(204, response.description, response.condition, None, response.properties)
    raise error_for(response.status, response.condition, response.description, call.context)
