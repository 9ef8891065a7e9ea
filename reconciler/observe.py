"""The one live-rules reader: the rules of many subscriptions at once, bounded, over one connection.

The management client pipelines the whole batch over a single AMQP connection from this one
thread, ``concurrency`` requests in flight at a time. Every failure is collected and reported
together, each naming its topic/subscription, except one of the namespace itself (unreachable,
token refused), which is reported once. The service refuses enumerate-rules on a
subscription that auto-forwards; given a ``fallback`` (the management REST client), those rules
are read over REST instead, and the result says which ones were (:attr:`LiveRules.read_over_rest`).
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from reconciler.errors import SbrulesError
from reconciler.model import DesiredState, Rule
from reconciler.namespace.errors import ManagementError, NotFoundError, UnauthorizedError, namespace_failure

DEFAULT_CONCURRENCY = 32

#: The live rules of each observed subscription, keyed by (topic, subscription).
ActualState = Mapping[tuple[str, str], Sequence[Rule]]


class RuleReader(Protocol):
    def list_rules_many(
        self, targets: Sequence[tuple[str, str]], *, window: int | None = None
    ) -> list[list[Rule] | ManagementError]: ...


class FallbackReader(Protocol):
    """Reads one subscription's rules another way (the management REST API)."""

    def list_rules(self, topic: str, subscription: str) -> list[Rule]: ...


class LiveRules(dict[tuple[str, str], tuple[Rule, ...]]):
    """An ActualState that also says which subscriptions' rules came over the REST fallback."""

    def __init__(self, rules: Mapping[tuple[str, str], tuple[Rule, ...]], read_over_rest: Sequence[tuple[str, str]] = ()):
        super().__init__(rules)
        self.read_over_rest: tuple[tuple[str, str], ...] = tuple(read_over_rest)


def browse_refused(exc: ManagementError) -> bool:
    """The service's refusal to browse (enumerate rules of, peek) an auto-forwarding entity."""
    text = (exc.description or str(exc) or "").lower()
    return "auto-forward" in text or "autoforward" in text


class ObserveError(SbrulesError):
    """One or more declared subscriptions could not be read; the message lists each, ``causes``
    holds the underlying errors."""

    def __init__(self, problems: Sequence[str], causes: Sequence[ManagementError] = ()):
        self.problems = list(problems)
        self.causes = list(causes)
        if len(self.problems) == 1:
            super().__init__(f"cannot read the live rules: {self.problems[0]}")
        else:
            super().__init__("cannot read the live rules:\n" + "\n".join(f"  {p}" for p in problems))


def explain(topic: str, subscription: str, exc: ManagementError) -> str:
    """A one-line, secret-free description of why ``topic/subscription`` could not be read."""
    where = f"{topic}/{subscription}"
    if browse_refused(exc):
        return (
            f"{where}: auto-forwarding is enabled on this subscription, and the service refuses to "
            "enumerate its rules over AMQP; sbrules reads them over the management REST API, which needs "
            "a key with Manage rights (or declare the subscription without rules, unmanaged)"
        )
    if isinstance(exc, NotFoundError):
        return f"{where}: topic {topic!r} or subscription {subscription!r} does not exist in the namespace"
    return f"{where}: {exc}"


def observe_subscriptions(
    client: RuleReader,
    targets: Sequence[tuple[str, str]],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    missing_ok: bool = False,
    fallback: FallbackReader | None = None,
) -> LiveRules:
    """Read ``targets`` concurrently; raise one ObserveError listing every failure.

    A subscription (or topic) that does not exist is a failure, unless ``missing_ok``: then it is
    simply absent from the result, for callers to whom it means "not created yet". Rules AMQP
    refuses to enumerate (auto-forwarding) are read through ``fallback`` when one is given.
    """
    if not targets:
        return LiveRules({})
    actual: dict[tuple[str, str], tuple[Rule, ...]] = {}
    failures: list[tuple[tuple[str, str], ManagementError]] = []
    over_rest: list[tuple[str, str]] = []
    for target, result in zip(targets, client.list_rules_many(targets, window=max(1, concurrency))):
        if isinstance(result, ManagementError) and fallback is not None and browse_refused(result):
            try:
                result = fallback.list_rules(*target)
                over_rest.append(target)
            except ManagementError:
                pass  # report the AMQP refusal, which explains why REST was needed
        if isinstance(result, NotFoundError) and missing_ok:
            continue
        if isinstance(result, ManagementError):
            failures.append((target, result))
        else:
            actual[target] = tuple(result)
    unreachable = namespace_failure(exc for _, exc in failures)
    if unreachable is not None:
        raise unreachable  # the namespace's failure, not each subscription's: said once
    if failures and all(isinstance(exc, UnauthorizedError) for _, exc in failures) and len(failures) > 1:
        (topic, sub), first = failures[0]
        raise ObserveError(
            [
                f"access refused for {len(failures)} of {len(targets)} subscriptions (check the key name, the key "
                f"and its rights); first: {topic}/{sub}: {first}"
            ],
            [exc for _, exc in failures],
        )
    if failures:
        raise ObserveError([explain(topic, sub, exc) for (topic, sub), exc in failures], [exc for _, exc in failures])
    return LiveRules(actual, over_rest)


def managed_subscriptions(desired: DesiredState) -> list[tuple[str, str]]:
    """(topic, subscription) of every declared subscription whose rule set the files own."""
    return [(t.name, s.name) for t, s in desired.subscriptions() if s.managed]


def observe(
    client: RuleReader,
    desired: DesiredState,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    fallback: FallbackReader | None = None,
    missing_ok: bool = False,
) -> LiveRules:
    """The live rules of every managed subscription declared in ``desired``."""
    return observe_subscriptions(
        client, managed_subscriptions(desired), concurrency=concurrency, fallback=fallback, missing_ok=missing_ok
    )
