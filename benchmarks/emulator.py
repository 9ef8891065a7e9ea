"""Emulator throughput: management requests/s and routed messages/s (50 rules per subscription).

Rule writes (add-rule and remove-rule of one name, in turn) are measured twice in the same run:
in memory, and with ``--state``, where each write is acknowledged only once the state file holds
it (one fsynced save per burst of writes), so the cost of durability is the difference.

The emulator runs as a separate process (``sbrules emulator``), as the reconciler benchmarks see
it; a pipelined proton client keeps a window of requests (or transfers) in flight and measures
completed operations per second. Prints one JSON document.

    python benchmarks/emulator.py [--requests 5000] [--messages 3000] [--window 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import proton
import yaml
from proton.handlers import MessagingHandler
from proton.reactor import Container

from reconciler.amqp.codec import encode_add_rule_body
from reconciler.model import Rule, SqlFilter
from reconciler.namespace.credentials import sas_token

RULES_PER_SUBSCRIPTION = 50
SUBSCRIPTIONS = 4


def _rules_file(directory: Path) -> Path:
    """A topic 'bench' with SUBSCRIPTIONS subscriptions of 50 SQL rules (some with actions) each."""
    subs = {}
    for s in range(SUBSCRIPTIONS):
        rules = []
        for r in range(RULES_PER_SUBSCRIPTION):
            rule = {"name": f"r{r}", "sql": f"region = 'r{(s * 7 + r) % 60}' AND amount > {r * 10}"}
            if r % 10 == 0:
                rule["action"] = f"SET tagged = 'r{r}'"
            rules.append(rule)
        subs[f"s{s}"] = {"rules": rules}
    subs["mgmt"] = {}
    path = directory / "bench.yaml"
    path.write_text(yaml.safe_dump({"topic": "bench", "subscriptions": subs}))
    return path


class _Pipelined(MessagingHandler):
    """Connect, put a token, then keep ``window`` operations in flight until ``total`` complete."""

    def __init__(self, url: str, key: str, entity: str, total: int, window: int, mode: str) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        self.url, self.key, self.entity = url, key, entity
        self.total, self.window, self.mode = total, window, mode
        self.sent = self.done = 0
        self.started = self.finished = 0.0
        self.conn = self.sender = None
        self.statuses: dict[int | str, int] = {}

    def on_start(self, event: proton.Event) -> None:
        self.conn = event.container.connect(self.url, allowed_mechs="ANONYMOUS")
        self.cbs_out = event.container.create_sender(self.conn, "$cbs", name="cbs-out")
        self.cbs_in = event.container.create_receiver(self.conn, "$cbs", name="cbs-in")
        self.cbs_in.flow(1)
        audience = f"sb://{self.url.split('//')[1]}/{self.entity.split('/')[0]}"
        token = sas_token(audience, "RootManageSharedAccessKey", self.key, int(time.time()) + 3600)
        self.cbs_out.send(proton.Message(
            id="t", body=token,
            properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience},
        ))

    def _open_work_links(self, container: Container) -> None:
        if self.mode in ("management", "writes"):
            node = f"{self.entity}/$management"
            self.sender = container.create_sender(self.conn, node, name="req")
            self.replies = container.create_receiver(self.conn, node, name="rep")
            self.replies.flow(self.window * 2)
        else:
            self.sender = container.create_sender(self.conn, self.entity, name="pub")
        self.started = time.perf_counter()

    def on_message(self, event: proton.Event) -> None:
        if event.link.name == "cbs-in":
            assert event.message.properties["status-code"] in (200, 202), event.message.properties
            self._open_work_links(event.container)
            return
        status = int(event.message.properties["statusCode"])
        self.statuses[status] = self.statuses.get(status, 0) + 1
        event.link.flow(1)
        self._completed(event)

    def on_accepted(self, event: proton.Event) -> None:
        if self.mode == "publish" and self.sender is not None and event.link.name == self.sender.name:
            self.statuses["accepted"] = self.statuses.get("accepted", 0) + 1
            self._completed(event)

    def on_rejected(self, event: proton.Event) -> None:
        if self.mode == "publish":
            self.statuses["rejected"] = self.statuses.get("rejected", 0) + 1
            self._completed(event)

    def _completed(self, event: proton.Event) -> None:
        self.done += 1
        if self.done >= self.total:
            self.finished = time.perf_counter()
            event.connection.close()
        else:
            self._fill()

    def on_sendable(self, event: proton.Event) -> None:
        if self.sender is not None and event.link.name == self.sender.name:
            self._fill()

    def _fill(self) -> None:
        while self.sender.credit and self.sent < self.total and self.sent - self.done < self.window:
            self.sender.send(self._next())
            self.sent += 1

    def _next(self) -> proton.Message:
        if self.mode == "writes":  # add, then remove, the same rule: n and n+1 arrive in order
            name = f"w{(self.sent // 2) % 1000}"
            if self.sent % 2 == 0:
                body, operation = encode_add_rule_body(Rule(name, SqlFilter("n = 1"))), "com.microsoft:add-rule"
            else:
                body, operation = {"rule-name": name}, "com.microsoft:remove-rule"
            return proton.Message(id=self.sent, reply_to="rep", body=body, properties={"operation": operation})
        if self.mode == "management":
            return proton.Message(
                id=self.sent, reply_to="rep", body={"top": proton.int32(100), "skip": proton.int32(0)},
                properties={"operation": "com.microsoft:enumerate-rules"},
            )
        n = self.sent
        return proton.Message(
            id=str(uuid.uuid4()), body=b"x" * 200,
            properties={"region": f"r{n % 60}", "amount": n % 700, "tenant": proton.int32(n % 13)},
        )


def _run(url: str, key: str, entity: str, total: int, window: int, mode: str) -> dict:
    handler = _Pipelined(url, key, entity, total, window, mode)
    Container(handler).run()
    seconds = handler.finished - handler.started
    return {"operations": handler.done, "seconds": round(seconds, 3), "per_second": round(handler.done / seconds, 1),
            "window": window, "outcomes": {str(k): v for k, v in sorted(handler.statuses.items(), key=lambda kv: str(kv[0]))}}


def _startup_seconds(rounds: int = 5) -> float:
    """Median time for the in-process Emulator to start serving and stop again."""
    from reconciler.emulator import Emulator

    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        with Emulator():
            times.append(time.perf_counter() - start)
    return round(sorted(times)[len(times) // 2], 4)


def _emulator(rules: Path, *extra: str) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "emulator", "--port", "0", "--rules", str(rules), *extra],
        stdout=subprocess.PIPE, text=True,
    )
    conn = proc.stdout.readline().strip()
    fields = dict(part.split("=", 1) for part in conn.split(";") if part)
    return proc, fields["Endpoint"].replace("sb://", "amqp://"), fields["SharedAccessKey"]


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rules = _rules_file(Path(tmp))
        proc, url, key = _emulator(rules)
        try:
            management = _run(url, key, "bench/Subscriptions/mgmt", args.requests, args.window, "management")
            writes = _run(url, key, "bench/Subscriptions/mgmt", args.writes, args.window, "writes")
            routed = _run(url, key, "bench", args.messages, args.window, "publish")
        finally:
            _stop(proc)
        proc, url, key = _emulator(rules, "--state", str(Path(tmp, "state.json")))
        try:
            durable = _run(url, key, "bench/Subscriptions/mgmt", args.writes, args.window, "writes")
            durable_one = _run(url, key, "bench/Subscriptions/mgmt", min(args.writes, 200), 1, "writes")
        finally:
            _stop(proc)
    print(json.dumps({
        "benchmark": "emulator",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "in_process_startup_seconds": _startup_seconds(),
        "management_requests": {"operation": "enumerate-rules (1 rule, top=100)", **management},
        "rule_writes": {"operation": "add-rule / remove-rule in turn", "in_memory": writes,
                        "with_state_file": durable, "with_state_file_one_at_a_time": durable_one},
        "routed_messages": {
            "subscriptions_with_sql_rules": SUBSCRIPTIONS,
            "sql_rules_per_subscription": RULES_PER_SUBSCRIPTION,
            "other_subscriptions": "1 with $Default",
            **routed,
        },
    }, indent=2))


if __name__ == "__main__":
    main()
