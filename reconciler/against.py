"""``sbrules test --against emulator``: the same cases proven against a broker.

A built-in emulator is started for the run with the declared rules; every case's message is
published to its topic with the SDK-compatible sender (``sbrules send``'s), and what each
subscription then holds is read back with peek-message: which subscriptions received the message
and each copy, with the properties a rule action set, and which dead-lettered it. Each case is
compared with the offline routing of the same message; a case the two disagree on fails, with the
difference.

Dead-lettering: where a rule's filter raises (a filter evaluation exception) or its action fails,
the broker moves the message to that subscription's dead-letter queue, with the reason
``FilterEvaluationException``, and still delivers what the subscription's other rules deliver.
Offline routing predicts it from the same evaluation (a rule whose outcome is an error); the
dead-letter queue of every subscription is peeked and compared, both ways.

Messages are told apart by MessageId: a case that sets none is sent as ``sbrules-test-N`` (and
routed offline with that id too, so that a filter reading ``sys.MessageId`` sees the same value).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any, Sequence

from reconciler.emulator.routing import FILTER_ERROR_REASON
from reconciler.model import DesiredState, Message, TypedValue, ValueType
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.cases import Case
from reconciler.ruletests.run import CaseResult, Finding, run_cases
from reconciler.sql import RouteResult

#: A subscription's dead-letter queue, under the subscription's path.
DEAD_LETTER_QUEUE = "$DeadLetterQueue"

#: sys properties the broker sets on every message it stores, which offline routing does not know.
_BROKER_SET = frozenset({"SequenceNumber", "EnqueuedTimeUtc", "EnqueuedSequenceNumber", "LockedUntilUtc", "Size",
                         "DeliveryCount", "DeadLetterSource", "LockToken", "State", "PartitionId"})
PAGE = 250


def _tagged(cases: Sequence[Case]) -> list[Case]:
    out = []
    for n, case in enumerate(cases):
        if "MessageId" not in case.message.sys:
            sys = {**case.message.sys, "MessageId": TypedValue(ValueType.STRING, f"sbrules-test-{n}")}
            case = replace(case, message=Message(sys=sys, user=case.message.user, body=case.message.body))
        out.append(case)
    return out


def _copy_key(message: Message, sys_names: Sequence[str]) -> tuple[Any, ...]:
    user = tuple(sorted((k, v.type.value, repr(v.value)) for k, v in message.user.items()))
    sys = tuple((k, repr(message.sys[k].value) if k in message.sys else None) for k in sys_names)
    return user, sys


def run_against_emulator(
    cases: Sequence[Case], state: DesiredState, environment: Environment | None = None
) -> list[CaseResult]:
    """Each case run offline and on an emulator; a disagreement fails the case with a finding."""
    from reconciler.amqp.client import ManagementClient
    from reconciler.emulator import Emulator

    tagged = _tagged(cases)
    results = run_cases(tagged, state, environment)
    sent = [r for r in results if r.status != "skipped" and not r.note.startswith("topic ")]
    by_topic: dict[str, list[CaseResult]] = defaultdict(list)
    for result in sent:
        actual = environment.actual_topic(result.case.topic) if environment is not None else result.case.topic
        topic = state.topic(actual)
        assert topic is not None
        by_topic[topic.name].append(result)
    received: dict[tuple[str, str], list[Message]] = defaultdict(list)  # (message id, subscription) → copies
    dead: dict[tuple[str, str], list[Message]] = defaultdict(list)  # (message id, subscription) → dead-lettered
    with Emulator(state) as emulator, ManagementClient(emulator.connection_string) as client:
        for topic_name, topic_results in by_topic.items():
            for start in range(0, len(topic_results), PAGE):
                batch = topic_results[start:start + PAGE]
                errors = client.send_messages(topic_name, [r.case.message for r in batch])
                refused = next((e for e in errors if e is not None), None)
                if refused is not None:
                    raise refused
            topic = state.topic(topic_name)
            assert topic is not None
            for sub in topic.subscriptions:
                for held, entity in ((received, sub.name), (dead, f"{sub.name}/{DEAD_LETTER_QUEUE}")):
                    for message in _peek_all(client, topic_name, entity):
                        message_id = message.sys.get("MessageId")
                        held[(str(message_id.value) if message_id else "", sub.name)].append(message)
    return [_compared(r, received, dead) if r in sent else r for r in results]


def _reason(message: Message) -> str | None:
    reason = message.user.get("DeadLetterReason")
    return str(reason.value) if reason is not None else None


def _peek_all(client: Any, topic: str, subscription: str) -> list[Message]:
    out: list[Message] = []
    start = 0
    while True:
        page = client.peek_messages(topic, subscription, start, PAGE)
        if not page:
            return out
        out += [p.message for p in page]
        start = page[-1].sequence_number + 1


def dead_lettered(routed: dict[str, RouteResult]) -> dict[str, str]:
    """The subscriptions that dead-letter the message, by name, each with why: the rules whose
    filter or action raised (what offline routing predicts of the broker)."""
    out = {}
    for name, result in routed.items():
        errors = [f"rule {rule!r}: {outcome.error}" for rule, outcome in result.rule_results if outcome.error is not None]
        if errors:
            out[name] = "; ".join(errors)
    return out


def _compared(
    result: CaseResult, received: dict[tuple[str, str], list[Message]], dead: dict[tuple[str, str], list[Message]] | None = None
) -> CaseResult:
    message_id = str(result.case.message.sys["MessageId"].value)
    findings = list(result.findings)
    dead = dead or {}
    predicted = dead_lettered(result.routed)
    subscriptions = {name for (mid, name) in [*received, *dead] if mid == message_id} | set(result.routed)
    for name in sorted(subscriptions):
        offline = [copy for _rule, copy in (result.routed[name].copies if name in result.routed else [])]
        sys_names = sorted({k for copy in offline for k in copy.sys if k not in _BROKER_SET})
        live = received.get((message_id, name), [])
        want = sorted(_copy_key(c, sys_names) for c in offline)
        got = sorted(_copy_key(c, sys_names) for c in live)
        if want != got:
            findings.append(Finding(
                name, f"{len(offline)} cop{'y' if len(offline) == 1 else 'ies'} (offline routing)",
                f"the emulator delivered {len(live)}" + ("" if len(live) != len(offline) else " with other properties"),
            ))
        moved = [m for m in dead.get((message_id, name), []) if _reason(m) == FILTER_ERROR_REASON]
        if (name in predicted) != bool(moved) or len(moved) > 1:
            findings.append(Finding(
                name,
                f"dead-lettered ({predicted[name]})" if name in predicted else "not dead-lettered (offline routing)",
                f"the emulator dead-lettered it {len(moved)} time{'' if len(moved) == 1 else 's'} "
                f"with reason {FILTER_ERROR_REASON}" if moved else "the emulator did not dead-letter it",
            ))
    if len(findings) == len(result.findings):
        return result
    return replace(result, status="failed", findings=findings)
