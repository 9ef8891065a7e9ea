"""Credit-based throttling of a Standard namespace: what each operation costs, and the throttled answer.

A Standard namespace gets a fixed number of credits each second, shared by every client of the
namespace; an operation admitted while credits remain is charged its cost, and once the second's
credits are spent every further request is refused with server-busy until the next second. Premium
namespaces have no credits. The facts, and where they come from: docs/throttling.md. The emulator
charges by this table; the client's pacer budgets by it.
"""

from __future__ import annotations

import re

#: Credits a Standard namespace gets per second.
STANDARD_CREDITS_PER_SECOND = 1000
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

#: `$management` operations on rules are management operations; the others move or inspect messages.
_RULE_OPERATIONS = frozenset({"enumerate-rules", "add-rule", "remove-rule"})

_WAIT_HINT = re.compile(r"please wait (\d+(?:\.\d+)?) seconds?", re.IGNORECASE)


def throttled_description(wait_seconds: int = THROTTLED_WAIT_SECONDS) -> str:
    """The service's description of a throttled request."""
    return (
        "The request was terminated because the entity is being throttled. "
        f"Error code: {THROTTLED_ERROR_CODE}. Please wait {wait_seconds} seconds and try again."
    )


def wait_hint(description: str | None) -> float | None:
    """The seconds a throttled answer asks the client to wait ("Please wait 2 seconds"), if it says."""
    match = _WAIT_HINT.search(description or "")
    return float(match.group(1)) if match else None


def operation_credits(operation: str, messages: int = 1) -> int:
    """What one `$management` operation costs: a rule operation is a management operation; any other
    is charged per message it returns or touches, at least one."""
    name = operation.removeprefix("com.microsoft:")
    if name in _RULE_OPERATIONS:
        return MANAGEMENT_CREDITS
    return MESSAGE_CREDITS * max(1, messages)
