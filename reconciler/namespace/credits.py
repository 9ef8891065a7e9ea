"""Credit-based throttling of a Standard namespace: what each operation costs, and the throttled answer.

A Standard namespace gets a fixed number of credits each second, shared by every client of the
namespace; an operation admitted while credits remain is charged its cost, and once the second's
credits are spent every further request is refused with server-busy until the next second. Premium
namespaces have no credits. The facts, and where they come from: docs/throttling.md. The emulator
charges by this table; the client's pacer budgets by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Credits a Standard namespace gets per second.
STANDARD_CREDITS_PER_SECOND = 1000
#: The emulator's ``--throttle`` tiers: credits per second (None: no credits, as on Premium).
THROTTLE_TIERS: dict[str, float | None] = {"none": None, "standard": STANDARD_CREDITS_PER_SECOND}
#: A management operation: create, read, update or delete of a queue, topic, subscription or rule.
MANAGEMENT_CREDITS = 10
#: A data operation (send, receive, peek), per message.
MESSAGE_CREDITS = 1
#: A message sent to a topic is evaluated against the rules of its subscriptions: per evaluation.
FILTER_EVALUATION_CREDITS = 1

#: The condition and error code of a throttled request.
THROTTLED_CONDITION = "com.microsoft:server-busy"
THROTTLED_ERROR_CODE = 50009
#: How long the service asks a throttled client to wait.
THROTTLED_WAIT_SECONDS = 2

#: sbrules' share of a Standard namespace's credits unless told otherwise: a quarter (250 credits/s,
#: 25 rule operations or 250 peeked messages a second) leaves three quarters to the namespace's own
#: senders and receivers, whose throttling is an outage while sbrules' is only a slower run.
DEFAULT_CREDIT_SHARE = 0.25

#: `$management` operations on rules are management operations; the others move or inspect messages.
_RULE_OPERATIONS = frozenset({"enumerate-rules", "add-rule", "remove-rule"})

_WAIT_HINT = re.compile(r"please wait (\d+(?:\.\d+)?) seconds?", re.IGNORECASE)


def throttled_description(wait_seconds: float = THROTTLED_WAIT_SECONDS) -> str:
    """The service's description of a throttled request."""
    return (
        "The request was terminated because the entity is being throttled. "
        f"Error code: {THROTTLED_ERROR_CODE}. Please wait {wait_seconds:g} seconds and try again."
    )


def credit_budget(max_credits: float | None = None, credit_share: float | None = None) -> float:
    """The credits per second sbrules may spend on a Standard namespace: ``max_credits`` when given,
    else ``credit_share`` (default ``DEFAULT_CREDIT_SHARE``) of the namespace's credits."""
    if max_credits is not None:
        return float(max_credits)
    share = DEFAULT_CREDIT_SHARE if credit_share is None else credit_share
    return share * STANDARD_CREDITS_PER_SECOND


def wait_hint(description: str | None) -> float | None:
    """The seconds a throttled answer asks the client to wait ("Please wait 2 seconds"), if it says."""
    match = _WAIT_HINT.search(description or "")
    return float(match.group(1)) if match else None


@dataclass(frozen=True)
class CreditCosts:
    """What each kind of operation costs; the service's by default (the emulator can be told others)."""

    management: int = MANAGEMENT_CREDITS
    message: int = MESSAGE_CREDITS
    filter_evaluation: int = FILTER_EVALUATION_CREDITS

    def operation(self, operation: str, messages: int = 1) -> int:
        """One `$management` operation: a rule operation is a management operation; any other is
        charged per message it returns or touches, at least one."""
        if operation.removeprefix("com.microsoft:") in _RULE_OPERATIONS:
            return self.management
        return self.message * max(1, messages)

    def send(self, messages: int, filter_evaluations: int) -> int:
        """Sending ``messages`` to an entity whose rules were evaluated ``filter_evaluations`` times."""
        return self.message * messages + self.filter_evaluation * filter_evaluations


#: The service's costs.
SERVICE_COSTS = CreditCosts()


def messages_touched(request: Any, response: Any = None) -> int:
    """How many messages a `$management` request returned (peek, receive) or named (lock tokens,
    sequence numbers, messages to schedule), given its body and its answer's: what a message
    operation is charged for, at least one."""
    for source, key in ((response, "messages"), (request, "messages"), (request, "lock-tokens"), (request, "sequence-numbers")):
        value = source.get(key) if isinstance(source, Mapping) else None
        items = getattr(value, "elements", value)  # a proton Array holds its items in ``elements``
        if isinstance(items, (list, tuple)):
            return len(items)
    return 1


def operation_credits(operation: str, messages: int = 1) -> int:
    """What one `$management` operation costs at the service's prices (see ``CreditCosts.operation``)."""
    return SERVICE_COSTS.operation(operation, messages)
