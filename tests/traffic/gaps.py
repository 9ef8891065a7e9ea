"""A shop whose routing has gaps: the rule file and the traffic sample the analyze tests and the
README's worked example share (written into a directory, no namespace needed).

Twenty orders, one a second from 2026-01-01T00:00:00Z: six EU orders and four US orders reach their
subscriptions; five UK orders for the warehouse, three pings and two US refunds reach nobody
(the sampling tap aside).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from reconciler.model import Message, TypedValue
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset

RULES = """\
topic: shop
subscriptions:
  eu-orders:
    rules:
      - {name: eu, sql: "region = 'eu'"}
      - {name: eu-large, sql: "region = 'eu' AND amount > 100"}
      - {name: mars, sql: "region = 'mars'"}
      - {name: impossible, sql: "amount > 5 AND amount < 3"}
  us-orders:
    rules:
      - {name: us, sql: "region = 'us' AND sys.Label = 'order'"}
      - {name: us-double, sql: "region = 'us' AND amount * 2 > 30"}
      - {name: tests, sql: "sys.Label LIKE '%.test'"}
  tap:
    sampling_tap: true
    rules:
      - {name: all, filter: true}
  legacy: {}
"""

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _orders() -> list[tuple[str, str | None, dict]]:
    """(sys.Label, sys.To, application properties) of each order, in enqueue order."""
    out: list[tuple[str, str | None, dict]] = []
    out += [("order", None, {"region": "eu", "amount": 50 * (i + 1)}) for i in range(6)]
    out += [("order", None, {"region": "us", "amount": 20}) for _ in range(4)]
    out += [("order.uk", "warehouse-uk", {"region": "uk", "amount": 30}) for _ in range(5)]
    out += [("ping", None, {}) for _ in range(3)]
    out += [("refund", None, {"region": "us", "amount": 10}) for _ in range(2)]
    return out


def write(directory: Path) -> tuple[Path, Path]:
    """rules/shop.yaml and samples/shop under ``directory``; their paths."""
    rules = directory / "rules" / "shop.yaml"
    rules.parent.mkdir(parents=True, exist_ok=True)
    rules.write_text(RULES, encoding="utf-8")
    sample = directory / "samples" / "shop"
    store = Dataset(sample)
    for i, (label, to, user) in enumerate(_orders()):
        sys = {
            "MessageId": TypedValue.infer(f"shop-{i + 1:02d}"),
            "Label": TypedValue.infer(label),
            "EnqueuedTimeUtc": TypedValue.infer(START + dt.timedelta(seconds=i)),
            "SequenceNumber": TypedValue.infer(i + 1),
        }
        if to is not None:
            sys["To"] = TypedValue.infer(to)
        message = Message(sys=sys, user={k: TypedValue.infer(v) for k, v in user.items()})
        store.add(message_to_row(message, topic="shop", subscription="tap"))
    store.flush()
    return rules, sample
