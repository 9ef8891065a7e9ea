"""Execute a Plan safely: stale check, safe order, gapless replacement, journal, partial failure.

Per subscription, apply first takes the subscription's lock (``reconciler.lock``: a rule the
namespace itself keeps unique), waiting while another run holds it, and releases it after its last
write. Under the lock it re-reads the live rules and refuses the subscription when their
fingerprint is not the one the plan was computed from (a subscription already in the planned end
state counts as done, so applying a plan twice changes nothing); given the declared rules (an
apply of rule files), it plans that subscription again instead. No request goes out once the
lock's lease could have lapsed (``send_guard``): the subscription is then locked and planned again
once from the declared rules, or reported LOCK LOST. It then runs creations,
replacements and deletions in that order, so a message is at worst delivered twice for a moment,
never dropped, and the subscription never has zero rules unless the files declare that. A gapless
replacement adds the new version under a temporary name first (see ``plan.temp_rule_name``);
an interrupted apply leaves at most that temporary rule, which the next plan removes.

The client retries, paces and reports each attempt of each request (``reconciler.namespace.pipeline``);
apply never retries on top of it. What a retried request finds is interpreted here, in one place:
add-rule answering "already exists" with an identical rule, or remove-rule answering "not found",
means the work is done (an earlier attempt landed, or another apply did it). A request whose
answer never came (the connection dropped, the client gave up waiting) has an unknown outcome:
apply re-reads the subscription and goes on from what it finds there, and only when it cannot read
it reports the change as unknown. Before a removal that leaves one rule or none it believes in,
apply re-reads too, and refuses when those rules are no longer there. Subscriptions run in
parallel (``parallel``) and every attempt of every request is journalled, with its throttling and
waits.

Ctrl-C is answered in two steps. The first lets every change in flight finish (a gapless replace
runs to its end, so no subscription is left between steps), starts nothing new, and ends in the
usual report, the interrupted subscriptions marked as such. A second stops before the next
request: a replace may then leave its temporary rule behind, which the next plan removes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Callable, Iterable, TextIO

from reconciler.apply.interrupts import CTRL_C_POLL_SECONDS, CtrlC, Signals, StoppedAtOnce
from reconciler.apply.journal import Journal
from reconciler.apply.report import ApplyReport, ApplyStatus, SubscriptionResult, render_report, report_to_json
from reconciler.apply.verify import Writes
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.lock import (
    DEFAULT_TIMEOUT_SECONDS,
    LEASE_SECONDS,
    Holder,
    LockBusy,
    LockLost,
    LockWaitInterrupted,
    RuleWriter,
    SubscriptionLock,
    lease_clock,
    without_locks,
)
from reconciler.model import DesiredState, Rule
from reconciler.names import name_key, same_name
from reconciler.namespace.errors import AlreadyExistsError, ManagementError, NotFoundError, NotSentError, outcome_unknown
from reconciler.namespace.pacing import Pacer
from reconciler.namespace.pipeline import Attempt, OnAttempt, send_guard
from reconciler.observe import explain
from reconciler.owners import NO_OWNERS
from reconciler.plan import (
    Change,
    ChangeKind,
    Plan,
    PlanError,
    SubscriptionPlan,
    fingerprint,
    partition,
    plan_subscription,
    same_rule,
    temp_rule_name,
)

__all__ = [
    "ApplyOptions",
    "ApplyReport",
    "ApplyStatus",
    "ReplaceStrategy",
    "RuleWriter",
    "SubscriptionResult",
    "apply_plan",
    "render_report",
    "report_to_json",
]


class ReplaceStrategy(StrEnum):
    """How a changed rule is replaced."""

    #: the new version under a temporary name first, so the subscription never lacks the rule
    GAPLESS = "gapless"
    #: remove, then add (a moment without the rule)
    DIRECT = "direct"


class StepFailed(SbrulesError):
    """A request of a change failed for good; the subscription stops there."""

    code = ErrorCode.SERVICE


@dataclass
class ApplyOptions:
    strategy: ReplaceStrategy = ReplaceStrategy.GAPLESS
    parallel: int = 4
    fail_fast: bool = False
    journal: TextIO | None = None
    #: Called once per applied change, e.g. to advance a progress bar.
    on_change: Callable[[Change], None] | None = None
    #: The client's pacer, whose totals (credits, throttling, waits) end the journal.
    pacer: Pacer | None = None
    #: Called on the first Ctrl-C, as apply starts finishing the changes in flight.
    on_interrupt: Callable[[], None] | None = None
    #: Who takes the subscriptions' locks (default: this process, a new run id).
    holder: Holder | None = None
    #: Seconds to wait for a subscription another run has locked, before reporting it LOCKED.
    lock_timeout: float = DEFAULT_TIMEOUT_SECONDS
    #: Seconds a lock lasts after its last confirmed renewal (renewed before a write once half of
    #: it is gone; no write once all but the safety margin is gone).
    lock_lease: float = LEASE_SECONDS
    #: Told when apply starts waiting for another run's lock: one progress line per run waited for.
    on_lock_wait: Callable[[str], None] | None = None
    #: The clock leases are measured on (``lock.lease_clock``; tests give their own).
    lock_clock: Callable[[], float] = lease_clock
    #: The declared rules the plan was made from (an apply of rule files): a subscription that
    #: changed since the plan is planned again under its lock instead of refused as stale.
    desired: DesiredState | None = None


class _NameTaken(StepFailed):
    """add-rule found a *different* rule under the name it wanted."""


class _OutcomeUnknown(StepFailed):
    """A request went unanswered and re-reading the subscription failed: its outcome is unknown."""


class _LockLostStep(StepFailed):
    """The lock's lease could have lapsed (or another run took it over) before a write went out.
    ``unknown``: an earlier attempt of that write went unanswered, so it may have landed."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


def _step_context(step: str, change: Change) -> str:
    return step if step == change.kind else f"{step} of rule {change.rule!r}"


def _failure(sp: SubscriptionPlan, exc: SbrulesError) -> str:
    """How a failed read or lock request is reported."""
    if isinstance(exc, ManagementError):
        return explain(sp.topic, sp.subscription, exc)
    return f"{sp.path}: {exc}"


def _names(rules: Iterable[Rule]) -> set[str]:
    return {name_key(r.name) for r in rules}


def _owned(owns: tuple[str, ...] | None, live: Iterable[Rule]) -> tuple[Rule, ...]:
    """The live rules a subscription's plan owns: foreign rules (``owns:``) are not ones sbrules may
    count on staying, so they never keep a subscription from being empty."""
    return partition(tuple(live), owns)[0]


class _Runner:
    """Applies the changes of one subscription under its lock, request by request, tracking which rules exist."""

    def __init__(
        self, client: RuleWriter, sp: SubscriptionPlan, options: ApplyOptions, journal: Journal, signals: "Signals",
        holder: Holder,
    ):
        self.client, self.sp, self.options, self.journal = client, sp, options, journal
        self.signals = signals
        self.live: set[str] = set()
        #: Each rule this run added or removed, checked once all are written.
        self.writes = Writes()
        #: Why the last unanswered request failed (what an unknown outcome reports).
        self.unanswered: SbrulesError | None = None
        #: The rules read when the lock was taken; how many changes of ``sp`` came before it
        #: (applied under a lock that was then lost and taken again).
        self.live_at_lock: tuple[Rule, ...] = ()
        self.done = 0
        #: Where the lock's problems (a renewal or release that failed) are reported.
        self.notes: list[str] = []
        self.lock = SubscriptionLock(
            client, sp.topic, sp.subscription, holder, lease=options.lock_lease,
            log=lambda **context: self._journal(holder=holder.who, run=holder.run, **context),
            on_problem=self._lock_problem, on_wait=signals.waiting_for, clock=options.lock_clock,
        )

    def _lock_problem(self, text: str) -> None:
        self.notes.append(text)
        self._log(outcome="lock-problem", error=text)

    def _log(self, **entry: object) -> None:
        self.journal.write(topic=self.sp.topic, subscription=self.sp.subscription, **entry)

    def _journal(self, **context: object) -> OnAttempt:
        """The client's report of each attempt of one request, journalled with what it was for."""

        def record(attempt: Attempt) -> None:
            self._log(**context, **attempt.to_json())

        return record

    # -- single requests: the client retries them; what they find is interpreted here ------------
    def _request(self, step: str, change: Change, op: str, rule_name: str, call: Callable[[OnAttempt], None]) -> str:
        """Run one rule write: "ok", "already-exists" (add-rule), "already-done" (remove-rule) or
        "unanswered" (it may or may not have taken effect)."""
        if self.signals.abort.is_set():
            raise StepFailed(f"{op} {rule_name!r} ({_step_context(step, change)}): not sent (stopped at once)")
        try:
            self.lock.keep()
        except LockLost as exc:
            raise _LockLostStep(f"{exc}; {op} {rule_name!r} ({_step_context(step, change)}) and the rest not sent") from None
        except SbrulesError as exc:
            raise StepFailed(f"{op} {rule_name!r} ({_step_context(step, change)}): not sent: {exc}") from None
        try:
            with send_guard(self.lock.lapsed):
                call(self._journal(change=change.kind, rule=change.rule, step=step, op=op, target=rule_name))
        except NotSentError as exc:
            raise _LockLostStep(f"{exc}; nothing more is written there", unknown=exc.after_retry) from None
        except AlreadyExistsError:
            return "already-exists"
        except NotFoundError as exc:
            if op == "remove-rule":
                self._log(rule=change.rule, step=step, op=op, target=rule_name, outcome="already-done")
                return "already-done"
            raise StepFailed(f"{op} {rule_name!r} ({_step_context(step, change)}): {exc}") from None
        except SbrulesError as exc:
            if outcome_unknown(exc):
                self.unanswered = exc
                return "unanswered"
            raise StepFailed(f"{op} {rule_name!r} ({_step_context(step, change)}): {exc}") from None
        return "ok"

    def _read(self, step: str) -> tuple[Rule, ...]:
        sp = self.sp
        try:
            return tuple(self.client.list_rules(sp.topic, sp.subscription, on_attempt=self._journal(
                step=step, op="enumerate-rules")))
        except SbrulesError as exc:
            raise StepFailed(_failure(self.sp, exc)) from None

    def _landed(self, step: str, change: Change, op: str, target: str, found: Callable[[tuple[Rule, ...]], bool]) -> bool:
        """Whether an unanswered write took effect, from a re-read of the subscription (journalled)."""
        what = f"{op} {target!r} ({_step_context(step, change)})"
        try:
            live = without_locks(self._read(step + ":re-read"))
        except StepFailed as exc:
            self._log(rule=change.rule, step=step, op=op, target=target, outcome="re-read", found="unknown")
            raise _OutcomeUnknown(
                f"{what}: the answer never came ({self.unanswered}), and re-reading the subscription failed ({exc})"
            ) from None
        landed = found(tuple(live))
        self._log(rule=change.rule, step=step, op=op, target=target, outcome="re-read",
                  found="applied" if landed else "not applied")
        self.live = _names(_owned(self.sp.owns, live))
        if not landed:
            raise StepFailed(f"{what}: the answer never came ({self.unanswered}); re-read: not applied")
        return True

    def _add(self, step: str, change: Change, rule: Rule) -> None:
        def call(on_attempt: OnAttempt) -> None:
            self.client.add_rule(self.sp.topic, self.sp.subscription, rule, on_attempt=on_attempt)

        outcome = self._request(step, change, "add-rule", rule.name, call)
        if outcome == "already-exists":
            live = next((r for r in self._read(step) if same_name(r.name, rule.name)), None)
            if live is None or not same_rule(live, rule):
                raise _NameTaken(
                    f"add-rule {rule.name!r} ({_step_context(step, change)}): a different rule "
                    "with this name exists (changed concurrently?)"
                )
            self._log(rule=change.rule, step=step, op="add-rule", target=rule.name, outcome="already-done")
        elif outcome == "unanswered":
            self._landed(step, change, "add-rule", rule.name, lambda live: any(same_rule(r, rule) for r in live))
        self.live.add(name_key(rule.name))
        self.writes.note(rule.name, rule)

    def _remove(self, step: str, change: Change, name: str) -> None:
        remaining = self.live - {name_key(name)}
        if not remaining and self.sp.rules_after > 0:
            raise StepFailed(f"refusing to remove {name!r}: the subscription would be left with no rules")
        if len(remaining) <= 1 and self.sp.rules_after > 0:
            # Memory is not the namespace: re-read before leaving one rule, in case another writer removed it.
            live = _names(_owned(self.sp.owns, self._read(step + ":check")))
            gone = remaining - live
            if gone:
                raise StepFailed(
                    f"refusing to remove {name!r}: this apply expected {', '.join(sorted(remaining))} to remain, "
                    f"but the namespace no longer has {', '.join(sorted(gone))} (changed concurrently?)"
                )
            self.live = live

        def call(on_attempt: OnAttempt) -> None:
            self.client.remove_rule(self.sp.topic, self.sp.subscription, name, on_attempt=on_attempt)

        if self._request(step, change, "remove-rule", name, call) == "unanswered":
            self._landed(step, change, "remove-rule", name, lambda live: name_key(name) not in _names(live))
        self.live.discard(name_key(name))
        self.writes.note(name, None)

    def _verify(self, result: SubscriptionResult) -> None:
        """Read the subscription once more: the rules another writer wrote right after apply are contested."""
        if not self.writes:
            return
        try:
            live = tuple(without_locks(self._read("verify")))
        except StepFailed as exc:
            self.notes.append(f"could not read it again to see whether another writer changed it at once: {exc}")
            return
        owners = self.options.desired.owners if self.options.desired is not None else NO_OWNERS
        result.contested += self.writes.check(self.sp.topic, self.sp.subscription, live, owners, self._log)

    # -- changes --------------------------------------------------------------------------------
    def apply_change(self, change: Change) -> None:
        if change.kind is ChangeKind.CREATE:
            assert change.after is not None
            self._add("create", change, change.after)
        elif change.kind is ChangeKind.DELETE:
            assert change.before is not None
            self._remove("delete", change, change.before.name)
        elif self.options.strategy is ReplaceStrategy.DIRECT and self.live - {name_key(change.rule)}:
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

    def run(self, result: SubscriptionResult) -> None:
        signals = self.signals
        if signals.interrupted.is_set():
            result.status, result.error = ApplyStatus.NOT_STARTED, "interrupted before it started"
            return
        if signals.fail_fast.is_set():
            result.status, result.error = ApplyStatus.NOT_STARTED, "stopped by --fail-fast after an earlier failure"
            return
        try:
            # A lost lock is taken again once, and the subscription planned again from the rule files.
            lost: str | None = None
            for again in (False, True):
                if not self._take(result):
                    if lost is not None:
                        result.status, result.error = ApplyStatus.LOCK_LOST, f"{lost}; taking it again failed: {result.error}"
                    return
                if lost is not None:
                    self.notes.append(f"{lost}; took its lock again and planned it again")
                try:
                    self._run_locked(result, self.live_at_lock, resumed=again)
                    return
                except _LockLostStep as exc:
                    self._log(outcome=ApplyStatus.LOCK_LOST, error=str(exc))
                    if exc.unknown:
                        result.unknown = self.sp.changes[len(result.applied) - self.done]
                    if again or exc.unknown or self.options.desired is None or signals.interrupted.is_set():
                        result.status, result.error = ApplyStatus.LOCK_LOST, str(exc)
                        return
                    lost = str(exc)
                finally:
                    self._release()
        finally:
            result.notes += self.notes

    def _take(self, result: SubscriptionResult) -> bool:
        """Take the subscription's lock (``live_at_lock``: what it read then); False when it could not."""
        try:
            self.live_at_lock = tuple(self.lock.acquire(self.options.lock_timeout, self.signals.interrupted))
            return True
        except LockBusy as exc:
            result.status = ApplyStatus.LOCKED
            result.error = f"LOCKED by {exc.lock.holder} (`sbrules unlock {self.sp.path}` if that run is gone)"
            self._log(outcome=ApplyStatus.LOCKED, holder=exc.lock.holder, error=str(exc))
        except LockWaitInterrupted:
            result.status, result.error = ApplyStatus.NOT_STARTED, "interrupted while waiting for its lock"
            self._log(outcome=result.status, error=result.error)
        except SbrulesError as exc:
            result.status, result.error = ApplyStatus.FAILED, f"could not take its lock: {_failure(self.sp, exc)}"
            self._log(outcome=result.status, error=result.error)
            self._release()  # in case the add landed unanswered
        return False

    def _release(self) -> None:
        self.lock.release()  # what cannot be removed is reported through _lock_problem

    def _run_locked(self, result: SubscriptionResult, live: tuple[Rule, ...], *, resumed: bool = False) -> None:
        sp = self.sp
        current = fingerprint(_owned(self.sp.owns, live))
        if resumed or current != sp.fingerprint:
            if not resumed and current == sp.target_fingerprint:
                result.status = ApplyStatus.ALREADY_APPLIED
                self._log(outcome=result.status)
                return
            replanned = _replan(self.options.desired, sp, live)
            if replanned is None:
                result.status = ApplyStatus.STALE
                result.error = (
                    f"stale plan: the live rules changed since the plan was made "
                    f"(planned from {sp.fingerprint[7:19]}…, now {current[7:19]}…); run `sbrules plan` again"
                )
                self._log(outcome=result.status, error=result.error)
                return
            # What was applied before the lock was lost stays at the head of the reported plan.
            self.done = len(result.applied)
            self.sp = sp = replanned
            result.plan = replace(replanned, changes=tuple(result.applied) + replanned.changes)
            result.replanned = True
            self._log(outcome="replanned", changes=len(sp.changes))
            if not sp.changes:
                result.status = ApplyStatus.APPLIED if result.applied else ApplyStatus.ALREADY_APPLIED
                self._log(outcome=result.status)
                return
        self.live = _names(_owned(self.sp.owns, live))
        self._apply_changes(result, sp.changes)

    def _apply_changes(self, result: SubscriptionResult, changes: Iterable[Change]) -> None:
        signals = self.signals
        for change in changes:
            if signals.interrupted.is_set():
                result.status, result.error = ApplyStatus.INTERRUPTED, "interrupted by Ctrl-C"
                self._log(outcome=result.status, changes=len(result.applied))
                break
            if signals.fail_fast.is_set():
                result.status, result.error = ApplyStatus.FAILED, "stopped by --fail-fast after a failure elsewhere"
                break
            try:
                self.apply_change(change)
            except _OutcomeUnknown as exc:
                result.status, result.error, result.unknown = ApplyStatus.UNKNOWN, str(exc), change
                self._log(outcome=result.status, rule=change.rule, error=result.error)
                break
            except _LockLostStep:
                raise
            except StepFailed as exc:
                result.status, result.error = ApplyStatus.FAILED, str(exc)
                self._log(outcome=result.status, error=result.error)
                break
            result.applied.append(change)
            if self.options.on_change:
                self.options.on_change(change)
        else:
            self._verify(result)
            result.status = ApplyStatus.APPLIED
            self._log(outcome=result.status, changes=len(result.applied))


def _replan(desired: DesiredState | None, sp: SubscriptionPlan, live: tuple[Rule, ...]) -> SubscriptionPlan | None:
    """``sp``'s subscription planned again from the declared rules, or None without them."""
    if desired is None:
        return None
    declared = next(
        (sub for topic, sub in desired.subscriptions() if (topic.name, sub.name) == (sp.topic, sp.subscription)), None
    )
    if declared is None:
        return None
    try:
        return plan_subscription(
            sp.topic, sp.subscription, declared.rules or (), live, allow_empty=declared.allow_empty, owns=declared.owns
        )
    except PlanError:
        return None


def apply_plan(client: RuleWriter, plan: Plan, options: ApplyOptions | None = None) -> ApplyReport:
    """Apply every subscription of ``plan`` (``options.parallel`` at a time); never raises for a
    failed request — the report says what was and was not applied."""
    options = options or ApplyOptions()
    try:
        options = replace(options, strategy=ReplaceStrategy(options.strategy))
    except ValueError:
        choices = " or ".join(ReplaceStrategy)
        raise SbrulesError(f"unknown replace strategy {options.strategy!r} (use {choices})") from None
    journal = Journal(options.journal)
    signals = Signals(on_lock_wait=options.on_lock_wait)
    results = [SubscriptionResult(sp) for sp in plan.subscriptions]

    holder = options.holder or Holder.this_run()

    def run(result: SubscriptionResult) -> None:
        if not result.plan.changes:
            result.status = ApplyStatus.UNCHANGED
            return
        _Runner(client, result.plan, options, journal, signals, holder).run(result)
        if not result.status.ok and options.fail_fast:
            signals.fail_fast.set()

    pool = ThreadPoolExecutor(max_workers=max(1, options.parallel), thread_name_prefix="apply")
    try:
        with CtrlC() as ctrl_c:
            futures = [pool.submit(run, result) for result in results]
            pending = set(futures)
            while pending:
                pending = wait(pending, timeout=CTRL_C_POLL_SECONDS).not_done
                if ctrl_c.presses and not signals.interrupted.is_set():
                    signals.interrupted.set()
                    journal.write(event="interrupted", then="finishing the changes in flight")
                    if options.on_interrupt:
                        options.on_interrupt()
                if ctrl_c.presses > 1:
                    signals.abort.set()
                    journal.write(event="interrupted", then="stopped at once")
                    raise StoppedAtOnce()
        for future in futures:
            future.result()
    finally:
        pool.shutdown(wait=not signals.abort.is_set(), cancel_futures=True)
    if options.pacer is not None:
        journal.write(event="pacing", **options.pacer.stats().to_json())
    return ApplyReport(results, interrupted=signals.interrupted.is_set())
