"""``sbrules test --against emulator``: the same cases proven against a broker.

A built-in emulator is started for the run with the declared rules; every case's message is
published to its topic with the SDK-compatible sender (``sbrules send``'s), and what each
subscription then holds is read back with peek-message: which subscriptions received the message
and each copy, with the properties a rule action set. Each case is compared with the offline
routing of the same message; a case the two disagree on fails, with the difference.

Messages are told apart by MessageId: a case that sets none is sent as ``sbrules-test-N`` (and
routed offline with that id too, so that a filter reading ``sys.MessageId`` sees the same value).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any, Sequence

from reconciler.model import DesiredState, Message, TypedValue, ValueType
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.cases import Case
from reconciler.ruletests.run import CaseResult, Finding, run_cases

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
                for message in _peek_all(client, topic_name, sub.name):
                    message_id = message.sys.get("MessageId")
                    received[(str(message_id.value) if message_id else "", sub.name)].append(message)
    return [_compared(r, received) if r in sent else r for r in results]


def _peek_all(client: Any, topic: str, subscription: str) -> list[Message]:
    out: list[Message] = []
    start = 0
    while True:
        page = client.peek_messages(topic, subscription, start, PAGE)
        if not page:
            return out
        out += [p.message for p in page]
        start = page[-1].sequence_number + 1


def _compared(result: CaseResult, received: dict[tuple[str, str], list[Message]]) -> CaseResult:
    message_id = str(result.case.message.sys["MessageId"].value)
    findings = list(result.findings)
    subscriptions = {name for (mid, name) in received if mid == message_id} | set(result.routed)
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
    if len(findings) == len(result.findings):
        return result
    return replace(result, status="failed", findings=findings)
