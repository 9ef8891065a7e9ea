"""The emulator's state file: rules, messages and session state survive a restart.

Written atomically (``reconciler.atomic_file``) so a crash leaves either the old or the new file,
never half of one; ``durability.py`` decides when, so that no write is acknowledged before it. Locks are not saved: after a
restart every locked message is visible again, as after a lock expiry.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

from reconciler import model
from reconciler.atomic_file import write_atomically
from reconciler.emulator.namespace import (
    MessageState,
    MessageStore,
    Namespace,
    RuleEntry,
    SessionInfo,
    StoredMessage,
    utcnow,
)
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.names import name_key

FORMAT_VERSION = 1


class StateFileError(SbrulesError):
    """A state file that cannot be read back."""

    code = ErrorCode.INPUT


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _time(value: _dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _untime(text: str | None) -> _dt.datetime | None:
    return None if text is None else _dt.datetime.fromisoformat(text)


def _store_doc(store: MessageStore) -> dict[str, Any]:
    return {
        "next_sequence": store.next_sequence,
        "messages": [
            {
                "sequence_number": m.sequence_number,
                "enqueued_time": _time(m.enqueued_time),
                "payload": _b64(m.payload),
                "session_id": m.session_id,
                "message_id": m.message_id,
                "state": m.state,
                "scheduled_time": _time(m.scheduled_time),
                "delivery_count": m.delivery_count,
                "dead_letter_source": m.dead_letter_source,
                "dead_letter_reason": m.dead_letter_reason,
                "dead_letter_description": m.dead_letter_description,
                "expires_at": _time(m.expires_at),
            }
            for m in store.messages.values()
        ],
        "sessions": {sid: _b64(info.state) for sid, info in store.sessions.items()},
    }


def _load_store(store: MessageStore, doc: dict[str, Any]) -> None:
    store.next_sequence = int(doc.get("next_sequence", 1))
    for m in doc.get("messages", []):
        stored = StoredMessage(
            sequence_number=int(m["sequence_number"]),
            enqueued_time=_dt.datetime.fromisoformat(m["enqueued_time"]),
            payload=_unb64(m["payload"]) or b"",
            session_id=m.get("session_id"),
            message_id=m.get("message_id"),
            state=MessageState(m.get("state", MessageState.ACTIVE)),
            scheduled_time=_untime(m.get("scheduled_time")),
            delivery_count=int(m.get("delivery_count", 0)),
            dead_letter_source=m.get("dead_letter_source"),
            dead_letter_reason=m.get("dead_letter_reason"),
            dead_letter_description=m.get("dead_letter_description"),
            expires_at=_untime(m.get("expires_at")),
        )
        store.restore(stored)
    for sid, state in doc.get("sessions", {}).items():
        store.sessions[sid] = SessionInfo(state=_unb64(state))


def snapshot(namespace: Namespace) -> dict[str, Any]:
    """The namespace as a JSON-ready document."""
    with namespace.lock:
        return {
            "version": FORMAT_VERSION,
            "topics": [
                {
                    "name": topic.name,
                    "scheduled": _store_doc(topic.store),
                    "subscriptions": [
                        {
                            "name": sub.name,
                            "forward_to": sub.forward_to,
                            "forward_dead_lettered_messages_to": sub.forward_dead_lettered_messages_to,
                            "requires_session": sub.requires_session,
                            "rules": [
                                {"rule": model.rule_to_doc(e.rule), "created_at": _time(e.created_at)}
                                for e in sub.rules.values()
                            ],
                            "messages": _store_doc(sub.store),
                            "dead_letters": _store_doc(sub.dead_letters),
                        }
                        for sub in topic.subscriptions.values()
                    ],
                }
                for topic in namespace.topics.values()
            ],
            "queues": [
                {"name": q.name, "messages": _store_doc(q.store), "dead_letters": _store_doc(q.dead_letters)}
                for q in namespace.queues.values()
            ],
        }


def restore(namespace: Namespace, doc: dict[str, Any]) -> None:
    """Load a snapshot into an empty namespace."""
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise StateFileError(f"unsupported emulator state format (expected version {FORMAT_VERSION})")
    with namespace.lock:
        for tdoc in doc.get("topics", []):
            topic = namespace.create_topic(tdoc["name"])
            _load_store(topic.store, tdoc.get("scheduled", {}))
            for sdoc in tdoc.get("subscriptions", []):
                sub = namespace.create_subscription(
                    topic.name, sdoc["name"], [],
                    forward_to=sdoc.get("forward_to"),
                    forward_dead_lettered_messages_to=sdoc.get("forward_dead_lettered_messages_to"),
                    requires_session=bool(sdoc.get("requires_session", False)),
                )
                for rdoc in sdoc.get("rules", []):
                    rule = model.rule_from_doc(rdoc["rule"])
                    sub.rules[name_key(rule.name)] = RuleEntry(rule, _untime(rdoc.get("created_at")) or utcnow())
                _load_store(sub.store, sdoc.get("messages", {}))
                _load_store(sub.dead_letters, sdoc.get("dead_letters", {}))
        for qdoc in doc.get("queues", []):
            queue = namespace.create_queue(qdoc["name"])
            _load_store(queue.store, qdoc.get("messages", {}))
            _load_store(queue.dead_letters, qdoc.get("dead_letters", {}))


def save(namespace: Namespace, path: str | os.PathLike[str]) -> None:
    """Write the state file atomically."""
    write(snapshot(namespace), path)


def write(doc: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a snapshot atomically, on disk (fsync) when this returns."""
    write_atomically(path, json.dumps(doc, separators=(",", ":")))


def load(namespace: Namespace, path: str | os.PathLike[str]) -> bool:
    """Restore from ``path`` if it exists; False when there is no state file yet."""
    target = Path(path)
    if not target.exists():
        return False
    try:
        doc = json.loads(target.read_text())
    except (OSError, ValueError) as exc:
        raise StateFileError(f"cannot read emulator state file {target}: {exc}") from None
    try:
        restore(namespace, doc)
    except (KeyError, TypeError, ValueError, model.RuleFormError) as exc:
        raise StateFileError(f"emulator state file {target} is damaged: {exc}") from None
    return True
