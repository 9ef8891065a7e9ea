"""Fixtures for the reconciler tests: an in-memory rule store with fault hooks, and rule builders."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Callable

import pytest

from reconciler.limits import is_lock_rule, is_lock_rule_name
from reconciler.model import CorrelationFilter, DesiredState, Rule, Subscription, Topic, TrueFilter
from reconciler.namespace.errors import AlreadyExistsError, ConnectionLostError, ManagementError, NotFoundError
from reconciler.namespace.pipeline import Call, Request, RequestPipeline, Response
from reconciler.namespace.retry import RetryPolicy


def corr(name: str, subject: str, **props) -> Rule:
    return Rule(name, CorrelationFilter(subject=subject, properties=props))


def desired_of(rules_by_sub: dict[tuple[str, str], list[Rule] | None]) -> DesiredState:
    topics: dict[str, list[Subscription]] = {}
    for (topic, sub), rules in rules_by_sub.items():
        topics.setdefault(topic, []).append(Subscription(sub, None if rules is None else tuple(rules)))
    return DesiredState(tuple(Topic(t, tuple(subs)) for t, subs in topics.items()))


class InMemoryTransport:
    """Runs each request's body (a function over the in-memory store) at once: the real pipeline
    (pacing, retry policy, attempt reports) over a fake namespace."""

    def submit(self, request: Request) -> None:
        try:
            result = request.body()
        except ManagementError as exc:
            request.finish(error=exc)
        else:
            request.finish(Response(200, None, None, result, {}))

    def forget(self, request: Request) -> bool:
        return False

    def close(self) -> None:
        pass


class FakeClient:
    """The three rule operations of ManagementClient over dicts, through the real request pipeline,
    with a hook that can inject faults.

    ``fault(op, topic, sub, name, phase)`` runs before ("before") and after ("after") the change
    takes effect and may return an exception to raise — after the change that models a lost response.
    Transient ones are retried by the pipeline, as the real client does.
    ``min_rules`` records the fewest rules each subscription ever had (the empty-subscription watcher).
    """

    def __init__(self, state: dict[tuple[str, str], list[Rule]]):
        self.subs = {key: {r.name.casefold(): r for r in rules} for key, rules in state.items()}
        self.ops: list[tuple[str, str, str, str]] = []
        self.fault: Callable[..., Exception | None] = lambda *a: None
        self.min_rules = {key: len(rules) for key, rules in self.subs.items()}
        self.lock = threading.Lock()
        self.pipeline = RequestPipeline(InMemoryTransport(), retry=RetryPolicy(backoff=0.001), timeout=5)

    def _call(self, op: str, topic: str, sub: str, run: Callable[[], object], on_attempt=None):
        return self.pipeline.call(Call(f"{topic}/Subscriptions/{sub}", op, run), on_attempt=on_attempt).body

    def _sub(self, topic: str, sub: str) -> dict[str, Rule]:
        try:
            return self.subs[(topic, sub)]
        except KeyError:
            raise NotFoundError(f"{topic}/{sub}: the messaging entity could not be found", status=404) from None

    def _hook(self, *args) -> None:
        exc = self.fault(*args)
        if exc is not None:
            raise exc

    def list_rules(self, topic: str, sub: str, *, on_attempt=None) -> list[Rule]:
        def run():
            self._hook("list", topic, sub, None, "before")
            with self.lock:
                return list(self._sub(topic, sub).values())

        return self._call("enumerate-rules", topic, sub, run, on_attempt)

    def list_rules_many(self, targets, *, window=None, on_attempt=None):
        """Like the real client: ``window`` reads in flight at once, each target's rules or error."""

        def read(target):
            try:
                return self.list_rules(*target)
            except ManagementError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=window or 64) as pool:
            return list(pool.map(read, targets))

    def add_rule(self, topic: str, sub: str, rule: Rule, *, on_attempt=None) -> None:
        def run():
            self._hook("add", topic, sub, rule.name, "before")
            with self.lock:
                rules = self._sub(topic, sub)
                if rule.name.casefold() in rules:
                    raise AlreadyExistsError(f"rule {rule.name} already exists", status=409)
                rules[rule.name.casefold()] = rule
                self.ops.append(("add", topic, sub, rule.name))
            self._hook("add", topic, sub, rule.name, "after")

        self._call("add-rule", topic, sub, run, on_attempt)

    def remove_rule(self, topic: str, sub: str, name: str, *, on_attempt=None) -> None:
        def run():
            self._hook("remove", topic, sub, name, "before")
            with self.lock:
                rules = self._sub(topic, sub)
                if rules.pop(name.casefold(), None) is None:
                    raise NotFoundError(f"rule {name} could not be found", status=404)
                self.ops.append(("remove", topic, sub, name))
                left = sum(not is_lock_rule(r) for r in rules.values())  # a lock rule delivers nothing
                self.min_rules[(topic, sub)] = min(self.min_rules[(topic, sub)], left)
            self._hook("remove", topic, sub, name, "after")

        self._call("remove-rule", topic, sub, run, on_attempt)

    @property
    def rule_ops(self) -> list[tuple[str, str, str, str]]:
        """``ops`` without the lock's own adds and removes: the writes to the rules that deliver."""
        return [op for op in self.ops if not is_lock_rule_name(op[3])]

    def rules(self, topic: str, sub: str) -> dict[str, Rule]:
        return {r.name: r for r in self.subs[(topic, sub)].values()}


def lost_response() -> Exception:
    return ConnectionLostError("connection dropped before the response")


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helpers above, as a fixture (test modules cannot import conftest under importlib mode)."""
    return SimpleNamespace(
        corr=corr,
        desired_of=desired_of,
        FakeClient=FakeClient,
        lost_response=lost_response,
        DEFAULT=Rule("$Default", TrueFilter()),
    )
