"""Execute a Plan safely: stale check, safe order, gapless replacement, journal, partial failure.

Per subscription, apply re-reads the live rules and refuses the subscription when their
fingerprint is not the one the plan was computed from (a subscription already in the planned end
state counts as done, so applying a plan twice changes nothing). It then runs creations,
replacements and deletions in that order, so a message is at worst delivered twice for a moment,
never dropped, and the subscription never has zero rules unless the files declare that. A gapless
replacement adds the new version under a temporary name first (see ``plan.temp_rule_name``);
an interrupted apply leaves at most that temporary rule, which the next plan removes.

Retried requests can find their work already done: add-rule answering "already exists" with an
identical rule, or remove-rule answering "not found", count as success. Subscriptions run in
parallel (``parallel``) and every request is journalled. Pacing (``--max-rate``) is the client's.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Callable, Protocol, TextIO

from reconciler.amqp.errors import AlreadyExistsError, ManagementError, NotFoundError
from reconciler.errors import SbrulesError
from reconciler.model import Rule
from reconciler.observe import explain
from reconciler.plan import Change, ChangeKind, Plan, SubscriptionPlan, fingerprint, same_rule, temp_rule_name

GAPLESS, DIRECT = "gapless", "direct"
STRATEGIES = (GAPLESS, DIRECT)
#: The client already retries each request; apply retries a step a few more times when the client
#: gave up on a transient failure (a longer outage). Steps are idempotent, so this is safe.
TRANSIENT_ATTEMPTS = 3


class RuleWriter(Protocol):
    def list_rules(self, topic: str, subscription: str) -> list[Rule]: ...
    def add_rule(self, topic: str, subscription: str, rule: Rule) -> None: ...
    def remove_rule(self, topic: str, subscription: str, name: str) -> None: ...


class StepFailed(SbrulesError):
    """A request of a change failed for good; the subscription stops there."""


@dataclass
class ApplyOptions:
    strategy: str = GAPLESS
    parallel: int = 4
    fail_fast: bool = False
    journal: TextIO | None = None
    #: Called once per applied change, e.g. to advance a progress bar.
    on_change: Callable[[Change], None] | None = None


class ApplyStatus(StrEnum):
    """Where one subscription ended up."""

    PENDING = "pending"
    APPLIED = "applied"
    ALREADY_APPLIED = "already-applied"  # found in the planned end state: nothing to do
    UNCHANGED = "unchanged"  # the plan has no changes for it
    STALE = "stale"  # refused: the live rules are not the ones the plan was computed from
    FAILED = "failed"
    NOT_STARTED = "not-started"  # --fail-fast stopped it before it began

    @property
    def ok(self) -> bool:
        return self in (ApplyStatus.APPLIED, ApplyStatus.ALREADY_APPLIED, ApplyStatus.UNCHANGED)


@dataclass
class SubscriptionResult:
    """What happened to one subscription: which changes were applied and which were not."""

    plan: SubscriptionPlan
    status: ApplyStatus = ApplyStatus.PENDING
    applied: list[Change] = field(default_factory=list)
    error: str | None = None

    @property
    def not_applied(self) -> list[Change]:
        """Changes run in plan order and stop at the first failure: the rest were not applied."""
        return list(self.plan.changes[len(self.applied):])


@dataclass
class ApplyReport:
    results: list[SubscriptionResult]

    @property
    def ok(self) -> bool:
        return all(r.status.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        return {
            "applied": sum(len(r.applied) for r in self.results),
            "not_applied": sum(
                len(r.not_applied) for r in self.results if r.status is not ApplyStatus.ALREADY_APPLIED
            ),
            "stale": sum(r.status is ApplyStatus.STALE for r in self.results),
            "failed": sum(r.status is ApplyStatus.FAILED for r in self.results),
            "not_started": sum(r.status is ApplyStatus.NOT_STARTED for r in self.results),
        }


_VERB = {
    ChangeKind.CREATE: ("+", "created"),
    ChangeKind.REPLACE: ("~", "replaced"),
    ChangeKind.DELETE: ("-", "deleted"),
}


def render_report(report: ApplyReport) -> str:
    """Exactly what was and was not applied, per subscription."""
    lines: list[str] = []
    for result in report.results:
        sp = result.plan
        if result.status is ApplyStatus.UNCHANGED:
            continue
        if result.status is ApplyStatus.ALREADY_APPLIED:
            lines.append(f"{sp.path}: already in the planned state, nothing to do")
            continue
        head = {
            ApplyStatus.APPLIED: f"{sp.path}: applied {len(result.applied)} change(s)",
            ApplyStatus.FAILED: f"{sp.path}: FAILED — {result.error}",
            ApplyStatus.STALE: f"{sp.path}: REFUSED — {result.error}",
            ApplyStatus.NOT_STARTED: f"{sp.path}: not started ({result.error})",
        }[result.status]
        lines.append(head)
        for change in result.applied:
            symbol, verb = _VERB[change.kind]
            lines.append(f"  {symbol} {verb} rule {change.rule!r}")
        for change in result.not_applied:
            symbol, _ = _VERB[change.kind]
            lines.append(f"  {symbol} NOT applied: {change.kind} rule {change.rule!r}")
    c = report.counts()
    summary = f"Apply {'complete' if report.ok else 'incomplete'}: {c['applied']} change(s) applied"
    if not report.ok:
        summary += (
            f", {c['not_applied']} not applied ({c['failed']} subscription(s) failed, "
            f"{c['stale']} refused as stale, {c['not_started']} not started). "
            "Re-run `sbrules plan`/`sbrules apply` to converge."
        )
    else:
        summary += "."
    lines.append(summary)
    return "\n".join(lines)


class Journal:
    """JSON lines, one per request and per subscription outcome, flushed as written (crash-safe)."""

    def __init__(self, stream: TextIO | None):
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, **entry: object) -> None:
        if self._stream is None:
            return
        entry = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")} | entry
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


class _NameTaken(StepFailed):
    """add-rule found a *different* rule under the name it wanted."""


def _step_context(step: str, change: Change) -> str:
    return step if step == change.kind else f"{step} of rule {change.rule!r}"


def _transient(exc: SbrulesError) -> bool:
    return bool(getattr(exc, "transient", False))


class _Runner:
    """Applies the changes of one subscription, request by request, tracking which rules exist."""

    def __init__(
        self, client: RuleWriter, sp: SubscriptionPlan, options: ApplyOptions, journal: Journal
    ):
        self.client, self.sp, self.options, self.journal = client, sp, options, journal
        self.live: set[str] = set()

    def _log(self, **entry: object) -> None:
        self.journal.write(topic=self.sp.topic, subscription=self.sp.subscription, **entry)

    # -- single requests, journalled, retried when transient, "already done" counted as done ------
    def _request(self, step: str, change: Change, op: str, rule_name: str, call: Callable[[], None]) -> str:
        for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
            started = time.perf_counter()
            outcome, error = "ok", None
            try:
                call()
            except AlreadyExistsError as exc:
                outcome, error = "already-exists", exc
            except NotFoundError as exc:
                outcome, error = ("already-done", None) if op == "remove-rule" else ("error", exc)
            except SbrulesError as exc:
                outcome, error = ("retry" if _transient(exc) and attempt < TRANSIENT_ATTEMPTS else "error"), exc
            self._log(
                change=change.kind, rule=change.rule, step=step, op=op, target=rule_name, attempt=attempt,
                outcome=outcome, error=str(error) if error else None,
                ms=round((time.perf_counter() - started) * 1000, 1),
            )
            if outcome == "retry":
                time.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            if outcome == "error":
                raise StepFailed(f"{op} {rule_name!r} ({_step_context(step, change)}): {error}")
            return outcome
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self) -> tuple[Rule, ...]:
        for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
            try:
                return tuple(self.client.list_rules(self.sp.topic, self.sp.subscription))
            except SbrulesError as exc:
                if not _transient(exc) or attempt == TRANSIENT_ATTEMPTS:
                    if isinstance(exc, ManagementError):
                        raise StepFailed(explain(self.sp.topic, self.sp.subscription, exc)) from None
                    raise StepFailed(f"{self.sp.path}: {exc}") from None
            time.sleep(min(0.1 * 2**attempt, 2.0))
        raise AssertionError("unreachable")  # pragma: no cover

    def _add(self, step: str, change: Change, rule: Rule) -> None:
        call = lambda: self.client.add_rule(self.sp.topic, self.sp.subscription, rule)  # noqa: E731
        if self._request(step, change, "add-rule", rule.name, call) == "already-exists":
            live = next((r for r in self._read() if r.name.casefold() == rule.name.casefold()), None)
            if live is None or not same_rule(live, rule):
                raise _NameTaken(
                    f"add-rule {rule.name!r} ({_step_context(step, change)}): a different rule "
                    "with this name exists (changed concurrently?)"
                )
            self._log(rule=change.rule, step=step, op="add-rule", target=rule.name, outcome="already-done")
        self.live.add(rule.name.casefold())

    def _remove(self, step: str, change: Change, name: str) -> None:
        if not self.live - {name.casefold()} and self.sp.rules_after > 0:
            raise StepFailed(f"refusing to remove {name!r}: the subscription would be left with no rules")
        call = lambda: self.client.remove_rule(self.sp.topic, self.sp.subscription, name)  # noqa: E731
        self._request(step, change, "remove-rule", name, call)
        self.live.discard(name.casefold())

    # -- changes --------------------------------------------------------------------------------
    def apply_change(self, change: Change) -> None:
        if change.kind is ChangeKind.CREATE:
            assert change.after is not None
            self._add("create", change, change.after)
        elif change.kind is ChangeKind.DELETE:
            assert change.before is not None
            self._remove("delete", change, change.before.name)
        elif self.options.strategy == DIRECT and self.live - {change.rule.casefold()}:
            assert change.before is not None and change.after is not None
            self._remove("replace:remove", change, change.before.name)
            self._add("replace:add", change, change.after)
        else:
            self._replace_gapless(change)

    def _replace_gapless(self, change: Change) -> None:
        """Add the new version as a temporary rule, swap the real one, remove the temporary rule."""
        assert change.before is not None and change.after is not None
        temp = replace(change.after, name=temp_rule_name(change.after.name))
        try:
            self._add("replace:add-temporary", change, temp)
        except _NameTaken:
            # A leftover of an older apply under the temporary name: ours to clear (the old rule still exists).
            self._remove("replace:clear-temporary", change, temp.name)
            self._add("replace:add-temporary", change, temp)
        self._remove("replace:remove-old", change, change.before.name)
        self._add("replace:add-new", change, change.after)
        self._remove("replace:remove-temporary", change, temp.name)

    def run(self, result: SubscriptionResult, stop: threading.Event) -> None:
        sp = self.sp
        if stop.is_set():
            result.status, result.error = ApplyStatus.NOT_STARTED, "stopped by --fail-fast after an earlier failure"
            return
        try:
            live = self._read()
        except StepFailed as exc:
            result.status, result.error = ApplyStatus.FAILED, str(exc)
            self._log(outcome=result.status, error=result.error)
            return
        current = fingerprint(live)
        if current == sp.target_fingerprint and current != sp.fingerprint:
            result.status = ApplyStatus.ALREADY_APPLIED
            self._log(outcome=result.status)
            return
        if current != sp.fingerprint:
            result.status = ApplyStatus.STALE
            result.error = (
                f"stale plan: the live rules changed since the plan was made "
                f"(planned from {sp.fingerprint[7:19]}…, now {current[7:19]}…); run `sbrules plan` again"
            )
            self._log(outcome=result.status, error=result.error)
            return
        self.live = {r.name.casefold() for r in live}
        for change in sp.changes:
            if stop.is_set():
                result.status, result.error = ApplyStatus.FAILED, "stopped by --fail-fast after a failure elsewhere"
                break
            try:
                self.apply_change(change)
            except StepFailed as exc:
                result.status, result.error = ApplyStatus.FAILED, str(exc)
                self._log(outcome=result.status, error=result.error)
                break
            result.applied.append(change)
            if self.options.on_change:
                self.options.on_change(change)
        else:
            result.status = ApplyStatus.APPLIED
            self._log(outcome=result.status, changes=len(result.applied))


def apply_plan(client: RuleWriter, plan: Plan, options: ApplyOptions | None = None) -> ApplyReport:
    """Apply every subscription of ``plan`` (``options.parallel`` at a time); never raises for a
    failed request — the report says what was and was not applied."""
    options = options or ApplyOptions()
    if options.strategy not in STRATEGIES:
        raise SbrulesError(f"unknown replace strategy {options.strategy!r} (use {' or '.join(STRATEGIES)})")
    journal = Journal(options.journal)
    stop = threading.Event()
    results = [SubscriptionResult(sp) for sp in plan.subscriptions]

    def run(result: SubscriptionResult) -> None:
        if not result.plan.changes:
            result.status = ApplyStatus.UNCHANGED
            return
        _Runner(client, result.plan, options, journal).run(result, stop)
        if result.status in (ApplyStatus.FAILED, ApplyStatus.STALE) and options.fail_fast:
            stop.set()

    with ThreadPoolExecutor(max_workers=max(1, options.parallel), thread_name_prefix="apply") as pool:
        list(pool.map(run, results))
    return ApplyReport(results)
