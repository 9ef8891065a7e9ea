"""A per-subscription write lock that the namespace itself enforces, taken by apply.

The lock is a rule: ``sbrules-lock.<generation>``, with a false filter (it delivers nothing) and
a SQL action that only carries who holds it, the run, its lease and (for people) the holder's idea
of when it ends. add-rule is atomic (a second add of the same name is answered "already exists"),
so of several writers adding the same generation one wins.

No run judges another run's lock by comparing its own wall clock with a time that run wrote:
clocks of different machines disagree. A waiter measures, on its own monotonic clock, how long it
has seen each other run's set of lock rules unchanged, and takes the lock over only after seeing
no change for that run's whole lease plus the safety margin (a quarter of the lease). A holder
renews by adding the next generation and then removing the old one, a change every waiter sees.
On its own clock (one that keeps counting while the machine sleeps) the holder counts from when it
sent its last confirmed renewal; before the lease minus the margin has passed it stops writing
(``send_guard`` stops even a paced request or a retry about to go out). What remains assumed: no
single request is in flight, or held up between that check and the wire, for longer than the
margin (docs/locking.md).

Taking it: read; while a lock of another run is there and not yet given up for dead, wait and
read again. Otherwise add the generation after the highest one seen, then read once more: if a
live lock of another run is there too (someone added a different generation from an older read),
withdraw ours and try again a moment later. That last read is what the holder plans from.

Releasing it: remove the lock rule. A run killed while holding it leaves it behind; the next run
takes it over after seeing it unchanged for its lease and margin, or ``sbrules unlock`` removes it.
Every failure to renew or release is reported (``on_problem``), never ignored.

Cost while held: the lock is a rule with a SQL (false) filter, so each message sent to the topic
is evaluated against it (one more filter evaluation, charged in credits on a Standard namespace)
and it counts against the topic's SQL-filter quota. It exists only while its holder writes.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import random
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from reconciler.errors import SbrulesError
from reconciler.limits import (
    LOCK_RULE_PREFIX,
    is_lock_rule,
    lock_action_fields,
    lock_generation,
)
from reconciler.model import FalseFilter, Rule, SqlRuleAction
from reconciler.namespace.errors import AlreadyExistsError, NotFoundError, outcome_unknown
from reconciler.namespace.pipeline import OnAttempt
from reconciler.redaction import redact

#: Seconds a lock lasts after its holder's last confirmed renewal (``--lock-lease``).
LEASE_SECONDS = 120.0
#: The safety margin, as a share of the lease: a holder stops writing this long before its lease
#: could lapse, and a waiter waits this long after it could have.
MARGIN_SHARE = 0.25
#: How long apply waits for a busy subscription by default (``--lock-timeout``): long enough to
#: take over a lock left by a killed run (lease + margin) with a few looks to spare.
DEFAULT_TIMEOUT_SECONDS = 180.0
#: Between two looks at a busy subscription: a random pause in this range (seconds).
POLL_SECONDS = (0.25, 1.0)

_UNSAFE = re.compile(r"[^A-Za-z0-9@._:/ +=?&%#~<>()-]")

#: The CI systems whose run a lock names by default: the variables each documents, and the run's URL.
_CI_RUNS: tuple[tuple[tuple[str, ...], Callable[..., str]], ...] = (
    (("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"),
     lambda server, repository, run: f"{server.rstrip('/')}/{repository}/actions/runs/{run}"),
    (("SYSTEM_COLLECTIONURI", "SYSTEM_TEAMPROJECT", "BUILD_BUILDID"),
     lambda collection, project, build: f"{collection.rstrip('/')}/{project}/_build/results?buildId={build}"),
    (("CI_JOB_URL",), lambda url: url),
    (("CI_PIPELINE_URL",), lambda url: url),
)


def lease_clock() -> float:
    """Seconds on a clock that never jumps and keeps counting while the machine sleeps (so a
    holder's lease never seems to last longer than it did)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def margin_of(lease: float) -> float:
    return lease * MARGIN_SHARE


class RuleWriter(Protocol):
    """The rule operations of ``ManagementClient``; each reports every attempt to ``on_attempt``."""

    def list_rules(self, topic: str, subscription: str, *, on_attempt: OnAttempt | None = None) -> list[Rule]: ...
    def add_rule(self, topic: str, subscription: str, rule: Rule, *, on_attempt: OnAttempt | None = None) -> None: ...
    def remove_rule(self, topic: str, subscription: str, name: str, *, on_attempt: OnAttempt | None = None) -> None: ...


#: Makes the attempt report of one lock request (journalled by apply); given the request's context.
AttemptLog = Callable[..., OnAttempt | None]


def default_holder(environ: Mapping[str, str] | None = None) -> str:
    """Who a lock names when nobody says: ``$SBRULES_LOCK_HOLDER``, else the CI run (GitHub
    Actions, Azure Pipelines, GitLab), else ``user@host``."""
    environ = os.environ if environ is None else environ
    if environ.get("SBRULES_LOCK_HOLDER"):
        return environ["SBRULES_LOCK_HOLDER"]
    for names, url in _CI_RUNS:
        values = [environ.get(name, "") for name in names]
        if all(values):
            return url(*values)
    return f"{_user()}@{socket.gethostname()}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: a readable name (public: anyone who can list rules reads it), and the
    run id that tells two runs of one person apart."""

    who: str
    run: str

    @classmethod
    def this_run(cls, who: str | None = None) -> "Holder":
        """This process, named ``who`` or :func:`default_holder`; secrets redacted, quotes replaced."""
        text = redact(who if who is not None else default_holder())
        return cls(_UNSAFE.sub("_", text)[:200], secrets.token_hex(6))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "someone"


@dataclass(frozen=True)
class LockRule:
    """A lock as found in a subscription. ``expires`` is the holder's wall-clock guess, shown to
    people and never used to decide anything."""

    name: str
    generation: int
    holder: str
    run: str
    lease: float
    expires: str

    @property
    def patience(self) -> float:
        """How long a waiter must see this lock's run unchanged before taking it over."""
        return self.lease + margin_of(self.lease)

    def describe(self) -> str:
        until = f", until about {self.expires} by its holder's clock" if self.expires else ""
        return f"locked by {self.holder}{until}"


def lock_rule_name(generation: int) -> str:
    return f"{LOCK_RULE_PREFIX}{generation}"


def lock_rule(generation: int, holder: Holder, lease: float, wall: float | None = None) -> Rule:
    """The rule that is the lock: a false filter; the action only carries who, the run and the lease."""
    wall = time.time() if wall is None else wall
    until = _dt.datetime.fromtimestamp(wall + lease, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    action = (
        f"SET sbrules_lock_holder = '{holder.who}'; SET sbrules_lock_run = '{holder.run}'; "
        f"SET sbrules_lock_lease = '{lease:g}'; SET sbrules_lock_expires = '{until}'"
    )
    return Rule(lock_rule_name(generation), FalseFilter(), SqlRuleAction(action))


def parse_lock(rule: Rule) -> LockRule | None:
    """The lock a rule is, or None when it is not one (:func:`reconciler.limits.is_lock_rule`)."""
    if not is_lock_rule(rule):
        return None
    assert isinstance(rule.action, SqlRuleAction)
    fields = lock_action_fields(rule.action.expression) or {}
    generation = lock_generation(rule.name)
    assert generation is not None
    try:
        lease = max(1.0, float(fields.get("lease", "")))
    except ValueError:
        lease = LEASE_SECONDS
    # Redacted when read too: a lock written by hand or by an older sbrules may carry a secret.
    holder = redact(fields.get("holder", "unknown"))
    return LockRule(rule.name, generation, holder, fields["run"], lease, fields.get("expires", ""))


def find_locks(rules: Iterable[Rule]) -> list[LockRule]:
    """The lock rules among ``rules``, by generation."""
    return sorted((lock for lock in map(parse_lock, rules) if lock is not None), key=lambda lock: lock.generation)


def without_locks(rules: Iterable[Rule]) -> list[Rule]:
    """``rules`` without lock rules: what plan, drift and apply compare."""
    return [rule for rule in rules if not is_lock_rule(rule)]


def unlock_hint(path: str) -> str:
    return f"`sbrules unlock {path}` removes it if its run is gone"


class LockError(SbrulesError):
    """The lock could not be taken or kept (a request failed, or another run took it over)."""


class LockLost(LockError):
    """This run may no longer write the subscription: its lease could have lapsed, or another run
    took the lock over. Nothing more is written there under this lock."""


class LockBusy(LockError):
    """Another run held the lock for the whole wait."""

    def __init__(self, path: str, lock: LockRule, waited: float, unchanged: float):
        super().__init__(f"{path}: LOCKED by {lock.holder} ({lock.name}; waited {waited:.0f}s, seen unchanged for "
                         f"{unchanged:.0f}s of the {lock.patience:.0f}s after which it is taken over); {unlock_hint(path)}")
        self.lock = lock


class LockWaitInterrupted(LockError):
    """Ctrl-C while waiting for a busy subscription."""


class SubscriptionLock:
    """The lock of one subscription, as one run takes, keeps and releases it."""

    def __init__(
        self,
        client: RuleWriter,
        topic: str,
        subscription: str,
        holder: Holder,
        *,
        lease: float = LEASE_SECONDS,
        log: AttemptLog | None = None,
        clock: Callable[[], float] = lease_clock,
        on_problem: Callable[[str], None] | None = None,
        on_wait: Callable[[str, LockRule], None] | None = None,
    ) -> None:
        self.client, self.topic, self.subscription, self.holder = client, topic, subscription, holder
        self.lease, self.margin, self.clock = lease, margin_of(lease), clock
        self._log: AttemptLog = log or (lambda **context: None)
        self._problem = on_problem or (lambda text: None)
        self._on_wait = on_wait
        self.held: LockRule | None = None
        #: When (``clock``) the add of the held lock was sent: the lease counts from there.
        self._renewed_at = 0.0
        #: Our own lock rules that are not ``held`` and still to remove (a renewal's old one).
        self._leftovers: list[str] = []
        #: Each other run's lock rules as last seen, and since when (``clock``) they were so.
        self._observed: dict[str, tuple[frozenset[str], float]] = {}
        #: The other run's lock that was seen last while waiting (what LOCKED names).
        self.seen: LockRule | None = None

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}"

    def _read(self, step: str) -> list[Rule]:
        return self.client.list_rules(self.topic, self.subscription, on_attempt=self._log(step=step, op="enumerate-rules"))

    def _observe(self, rules: list[Rule]) -> tuple[list[LockRule], list[LockRule]]:
        """Other runs' locks in a read just made: (live, given up for dead). A run's locks are dead
        once this run has seen them unchanged for their lease and margin."""
        now = self.clock()
        by_run: dict[str, list[LockRule]] = {}
        for lock in find_locks(rules):
            if lock.run != self.holder.run:
                by_run.setdefault(lock.run, []).append(lock)
        observed: dict[str, tuple[frozenset[str], float]] = {}
        for run, locks in by_run.items():
            names = frozenset(lock.name for lock in locks)
            before = self._observed.get(run)
            observed[run] = before if before is not None and before[0] == names else (names, now)
        self._observed = observed
        live: list[LockRule] = []
        dead: list[LockRule] = []
        for run, locks in by_run.items():
            unchanged = now - observed[run][1]
            (dead if unchanged >= max(lock.patience for lock in locks) else live).extend(locks)
        return live, dead

    def unchanged_for(self, lock: LockRule) -> float:
        """How long this run has seen ``lock``'s run unchanged."""
        since = self._observed.get(lock.run)
        return self.clock() - since[1] if since is not None else 0.0

    def _add(self, generation: int, step: str) -> LockRule | None:
        """Add our lock at ``generation``; None when that generation was taken first."""
        rule = lock_rule(generation, self.holder, self.lease)
        try:
            self.client.add_rule(self.topic, self.subscription, rule,
                                 on_attempt=self._log(step=step, op="add-rule", target=rule.name))
        except AlreadyExistsError:
            # Someone's, or ours when an earlier attempt of this request landed unanswered.
            found = self._find(rule.name, step)
            return found if found is not None and found.run == self.holder.run else None
        except SbrulesError as exc:
            if not outcome_unknown(exc):
                raise
            try:
                found = self._find(rule.name, step + ":re-read")
            except SbrulesError as again:
                raise LockError(f"{self.path}: the answer to adding its lock {rule.name!r} never came ({exc}), and "
                                f"re-reading failed ({again}); {unlock_hint(self.path)}") from None
            if found is None or found.run != self.holder.run:
                raise
            return found
        lock = parse_lock(rule)
        assert lock is not None
        return lock

    def _find(self, name: str, step: str) -> LockRule | None:
        return next((lock for lock in find_locks(self._read(step)) if lock.name == name), None)

    def _remove(self, name: str, step: str, *, ours_until_now: bool = False) -> None:
        """Remove a lock rule; already gone is fine, but for a lock this run held until now (its own
        earlier attempt aside) that means another run or `sbrules unlock` removed it: reported."""
        try:
            self.client.remove_rule(self.topic, self.subscription, name,
                                    on_attempt=self._log(step=step, op="remove-rule", target=name))
        except NotFoundError as exc:
            if ours_until_now and not exc.after_retry:
                self._problem(f"its lock {name!r} was already gone when this run removed it: another run took it "
                              "over or `sbrules unlock` removed it while this run held it, so another apply may have "
                              "written alongside it; run `sbrules plan` to see where the subscription stands")

    def _next_generation(self, rules: list[Rule]) -> int:
        """One more than the highest generation any rule's name carries (a lock's or not)."""
        names = [(generation, rule.name) for rule in rules if (generation := lock_generation(rule.name)) is not None]
        top, name = max(names, default=(0, ""))
        if len(str(top + 1)) > len(str(top)) and lock_generation(lock_rule_name(top + 1)) is None:
            raise LockError(f"{self.path}: {name!r} carries the highest lock generation a rule name can hold, so "
                            f"no lock can be added after it; `sbrules unlock {self.path}` removes lock rules "
                            "(a rule of that name that is no lock: rename or remove it)")
        return top + 1

    def acquire(self, timeout: float, stop: threading.Event) -> list[Rule]:
        """Take the lock, waiting up to ``timeout`` seconds while another run holds it; the
        subscription's rules (lock rules left out) as read once it was ours.

        Raises LockBusy after the wait, LockWaitInterrupted when ``stop`` is set while waiting,
        and the client's errors as they come.
        """
        started = self.clock()
        told = False
        while True:
            rules = self._read("lock:read")
            live, _ = self._observe(rules)
            if not live:
                sent = self.clock()
                mine = self._add(self._next_generation(rules), "lock:take")
                if mine is not None:
                    rules = self._read("lock:check")
                    live, dead = self._observe(rules)
                    if not live:
                        self.held, self._renewed_at = mine, sent
                        self._clear(rules, dead)
                        return without_locks(rules)
                    self._withdraw(mine.name)  # both added: both step back, then try again
                    pause = random.uniform(0, POLL_SECONDS[0])
                else:
                    pause = 0.0  # taken a moment ago: read again to see by whom
            else:
                self.seen = live[-1]
                waited = self.clock() - started
                if waited >= timeout:
                    raise LockBusy(self.path, self.seen, waited, self.unchanged_for(self.seen))
                if not told and self._on_wait is not None:
                    told = True
                    self._on_wait(self._waiting_line(self.seen, timeout - waited), self.seen)
                pause = min(random.uniform(*POLL_SECONDS), max(0.0, timeout - waited))
            if pause and stop.wait(pause):
                raise LockWaitInterrupted(f"{self.path}: interrupted while waiting for its lock")

    def _waiting_line(self, lock: LockRule, left: float) -> str:
        takeover = max(0.0, lock.patience - self.unchanged_for(lock))
        return (f"{self.path}: locked by {lock.holder} ({lock.name}); waiting up to {left:.0f}s, taken over if it "
                f"stays unchanged for {takeover:.0f}s more; {unlock_hint(self.path)}")

    def _withdraw(self, name: str) -> None:
        try:
            self._remove(name, "lock:withdraw")
        except SbrulesError as exc:
            self._problem(f"its lock {name!r} could not be withdrawn ({exc}); other runs take it over after "
                          f"{self.lease + self.margin:.0f}s, or `sbrules unlock {self.path}` removes it")

    def _clear(self, rules: list[Rule], dead: list[LockRule]) -> None:
        """Remove the locks of runs given up for dead, and our own older ones (another taker may
        remove them first)."""
        ours = [lock.name for lock in find_locks(rules) if lock.run == self.holder.run and self.held is not None
                and lock.name != self.held.name]
        for name in [lock.name for lock in dead] + ours:
            try:
                self._remove(name, "lock:clear")
            except SbrulesError as exc:
                self._problem(f"the lock {name!r} left by another run (or an earlier try of this one) could not be "
                              f"removed ({exc}); `sbrules unlock {self.path}` removes it")

    def lapsed(self) -> str | None:
        """Why this run may not write now (its lease could have lapsed, or it holds no lock), or None."""
        if self.held is None:
            return "this run does not hold its lock"
        elapsed = self.clock() - self._renewed_at
        if elapsed >= self.lease - self.margin:
            return (f"{elapsed:.0f}s since its lock was last renewed, and a lease of {self.lease:g}s allows writing "
                    f"for {self.lease - self.margin:g}s")
        return None

    def keep(self) -> None:
        """Before a write: LockLost once the lease could have lapsed; a renewal once half of it
        has passed since the last confirmed one."""
        why = self.lapsed()
        if why is not None:
            raise LockLost(why)
        held = self.held
        assert held is not None
        if self.clock() - self._renewed_at < self.lease / 2:
            return
        sent = self.clock()
        try:
            renewed = self._add(held.generation + 1, "lock:renew")
        except SbrulesError as exc:
            self._problem(f"its lock {held.name!r} could not be renewed ({exc}); writing stops "
                          f"{self.lease - self.margin:g}s after the last renewal; {unlock_hint(self.path)}")
            return
        if renewed is None:
            self.held = None
            self._leftovers.append(held.name)
            raise LockLost(f"another run took its lock over ({held.name!r} → {lock_rule_name(held.generation + 1)!r})")
        self.held, self._renewed_at = renewed, sent
        self._leftovers.append(held.name)
        self._remove_leftovers("lock:renew", "its previous lock", held.name)

    def _remove_leftovers(self, step: str, what: str, held: str | None = None) -> None:
        for name in list(self._leftovers):
            try:
                self._remove(name, step, ours_until_now=name == held)
            except SbrulesError as exc:
                self._problem(f"{what} {name!r} could not be removed ({exc}); {unlock_hint(self.path)}")
            else:
                self._leftovers.remove(name)

    def release(self) -> None:
        """Remove our lock rules; each that cannot be removed is reported (``on_problem``)."""
        held, lost = self.held, self.lapsed() is not None  # lapsed: LOCK LOST already says so
        if held is not None:
            self._leftovers.append(held.name)
            self.held = None
        self._remove_leftovers("lock:release", "its lock", held.name if held is not None and not lost else None)
