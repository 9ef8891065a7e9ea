"""A per-subscription write lock that the namespace itself enforces, taken by apply and unlock.

The lock is a rule: ``sbrules-lock.<generation>``, with a false filter (it delivers nothing) and
a SQL action that only carries who holds it and until when. add-rule is atomic (a second add of
the same name is answered "already exists"), so of several writers adding the same generation
one wins. Taking over an expired lock adds the *next* generation, never removes and re-adds the
same name, so two takers cannot both win by removing each other's lock.

Taking it: read; if an unexpired lock of another run is there, wait and read again. Otherwise add
the generation after the highest one seen, then read once more: if an unexpired lock of another
run is there too (someone added a different generation from an older read), withdraw ours and
try again a moment later. Of two runs that both added, the later read sees the earlier add, so at
most one goes on; both may withdraw, and a random pause separates their next tries. That last
read is also what the holder plans from: the rules it returns were read under the lock.

Holding it: a lock lasts ``lease`` seconds from when it was written. Before each write, a holder
whose lock has less than half its lease left renews it: it adds the next generation with a new
expiry, then removes the old one (add-rule being the atomic primitive, renewal is a new lock,
not an update). A renewal answered "already exists" means another run took the lock over after it
expired: the holder stops writing. A run stalled inside one request for longer than the lease can
be overtaken mid-request; nothing in Service Bus can fence that, which is why the lease is long
next to a request's timeout.

Releasing it: remove the lock rule. A run killed while holding it leaves it behind; it expires by
itself after the lease, or ``sbrules unlock`` removes it.

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
from typing import Callable, Iterable, Protocol

from reconciler.errors import SbrulesError
from reconciler.limits import LOCK_RULE_PREFIX, is_lock_rule_name
from reconciler.model import FalseFilter, Rule, SqlRuleAction
from reconciler.namespace.errors import AlreadyExistsError, NotFoundError, outcome_unknown
from reconciler.namespace.pipeline import OnAttempt

#: Seconds a lock lasts from when it was written (renewed at half of it, before a write).
LEASE_SECONDS = 120.0
#: How long apply waits for a busy subscription by default (``--lock-timeout``).
DEFAULT_TIMEOUT_SECONDS = 120.0
#: Between two looks at a busy subscription: a random pause in this range (seconds).
POLL_SECONDS = (0.25, 1.0)

_FIELD = re.compile(r"sbrules_lock_(holder|run|expires)\s*=\s*'((?:[^']|'')*)'", re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9@._:/ +-]")


class RuleWriter(Protocol):
    """The rule operations of ``ManagementClient``; each reports every attempt to ``on_attempt``."""

    def list_rules(self, topic: str, subscription: str, *, on_attempt: OnAttempt | None = None) -> list[Rule]: ...
    def add_rule(self, topic: str, subscription: str, rule: Rule, *, on_attempt: OnAttempt | None = None) -> None: ...
    def remove_rule(self, topic: str, subscription: str, name: str, *, on_attempt: OnAttempt | None = None) -> None: ...


#: Makes the attempt report of one lock request (journalled by apply); given the request's context.
AttemptLog = Callable[..., OnAttempt | None]


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: a readable name, and the run id that tells two runs of one person apart."""

    who: str
    run: str

    @classmethod
    def this_run(cls, who: str | None = None) -> "Holder":
        """This process: ``$SBRULES_LOCK_HOLDER`` (e.g. a pipeline's run URL), else user@host pid."""
        if who is None:
            who = os.environ.get("SBRULES_LOCK_HOLDER") or f"{_user()}@{socket.gethostname()} pid {os.getpid()}"
        return cls(_UNSAFE.sub("_", who)[:200], secrets.token_hex(6))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "someone"


@dataclass(frozen=True)
class LockRule:
    """A lock as found in a subscription."""

    name: str
    generation: int
    holder: str
    run: str
    expires: _dt.datetime

    def expired(self, now: float) -> bool:
        return self.expires.timestamp() <= now

    def describe(self, now: float) -> str:
        until = self.expires.strftime("%Y-%m-%d %H:%M:%SZ")
        if self.expired(now):
            return f"a lock left by {self.holder}, expired at {until}"
        return f"locked by {self.holder} until {until}"


def lock_rule_name(generation: int) -> str:
    return f"{LOCK_RULE_PREFIX}{generation}"


def lock_rule(generation: int, holder: Holder, expires: float) -> Rule:
    """The rule that is the lock: a false filter; the action only carries holder and expiry."""
    until = _dt.datetime.fromtimestamp(expires, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    action = (
        f"SET sbrules_lock_holder = '{holder.who}'; SET sbrules_lock_run = '{holder.run}'; "
        f"SET sbrules_lock_expires = '{until}'"
    )
    return Rule(lock_rule_name(generation), FalseFilter(), SqlRuleAction(action))


def parse_lock(rule: Rule) -> LockRule | None:
    """The lock a rule is, or None when it is not a lock rule. A lock rule whose text cannot be
    read (written by hand?) is a lock held by "unknown" that has already expired."""
    if not is_lock_rule_name(rule.name):
        return None
    suffix = rule.name[len(LOCK_RULE_PREFIX):]
    generation = int(suffix) if suffix.isdigit() else 0
    text = rule.action.expression if isinstance(rule.action, SqlRuleAction) else ""
    fields = {key.lower(): value.replace("''", "'") for key, value in _FIELD.findall(text)}
    try:
        expires = _dt.datetime.strptime(fields.get("expires", ""), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        expires = _dt.datetime.fromtimestamp(0, _dt.timezone.utc)
    return LockRule(rule.name, generation, fields.get("holder", "unknown"), fields.get("run", ""), expires)


def find_locks(rules: Iterable[Rule]) -> list[LockRule]:
    """The lock rules among ``rules``, by generation."""
    return sorted((lock for lock in map(parse_lock, rules) if lock is not None), key=lambda lock: lock.generation)


def without_locks(rules: Iterable[Rule]) -> list[Rule]:
    """``rules`` without lock rules: what plan, drift and apply compare."""
    return [rule for rule in rules if not is_lock_rule_name(rule.name)]


class LockError(SbrulesError):
    """The lock could not be taken or kept (a request failed, or another run took it over)."""


class LockBusy(LockError):
    """Another run held the lock for the whole wait."""

    def __init__(self, path: str, lock: LockRule, waited: float):
        super().__init__(f"{path}: LOCKED by {lock.holder} (waited {waited:.0f}s; its lock expires at "
                         f"{lock.expires.strftime('%H:%M:%SZ')})")
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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.topic, self.subscription, self.holder = client, topic, subscription, holder
        self.lease, self.clock = lease, clock
        self._log: AttemptLog = log or (lambda **context: None)
        self.held: LockRule | None = None
        #: The other run's lock that was seen last while waiting (what LOCKED names).
        self.seen: LockRule | None = None

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}"

    def _read(self, step: str) -> list[Rule]:
        return self.client.list_rules(self.topic, self.subscription, on_attempt=self._log(step=step, op="enumerate-rules"))

    def _others(self, rules: list[Rule]) -> list[LockRule]:
        now = self.clock()
        return [lock for lock in find_locks(rules) if lock.run != self.holder.run and not lock.expired(now)]

    def _add(self, generation: int, step: str) -> LockRule | None:
        """Add our lock at ``generation``; None when that generation was taken first."""
        rule = lock_rule(generation, self.holder, self.clock() + self.lease)
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
                raise LockError(f"{self.path}: the answer to taking its lock never came ({exc}), and re-reading "
                                f"failed ({again}); {rule.name!r} may be left until it expires") from None
            if found is None or found.run != self.holder.run:
                raise
            return found
        lock = parse_lock(rule)
        assert lock is not None
        return lock

    def _find(self, name: str, step: str) -> LockRule | None:
        return next((lock for lock in find_locks(self._read(step)) if lock.name == name), None)

    def _remove(self, name: str, step: str) -> None:
        try:
            self.client.remove_rule(self.topic, self.subscription, name,
                                    on_attempt=self._log(step=step, op="remove-rule", target=name))
        except NotFoundError:
            pass

    def acquire(self, timeout: float, stop: threading.Event) -> list[Rule]:
        """Take the lock, waiting up to ``timeout`` seconds while another run holds it; the
        subscription's rules (lock rules left out) as read once it was ours.

        Raises LockBusy after the wait, LockWaitInterrupted when ``stop`` is set while waiting,
        and the client's errors as they come.
        """
        started = self.clock()
        while True:
            rules = self._read("lock:read")
            others = self._others(rules)
            if not others:
                top = max((lock.generation for lock in find_locks(rules)), default=0)
                mine = self._add(top + 1, "lock:take")
                if mine is not None:
                    rules = self._read("lock:check")
                    others = self._others(rules)
                    if not others:
                        self.held = mine
                        self._clear_expired(rules)
                        return without_locks(rules)
                    self._remove(mine.name, "lock:withdraw")  # both added: both step back, then try again
                    pause = random.uniform(0, POLL_SECONDS[0])
                else:
                    pause = 0.0  # taken a moment ago: read again to see by whom
            else:
                self.seen = others[-1]
                waited = self.clock() - started
                if waited >= timeout:
                    raise LockBusy(self.path, self.seen, waited)
                pause = min(random.uniform(*POLL_SECONDS), max(0.0, timeout - waited))
            if pause and stop.wait(pause):
                raise LockWaitInterrupted(f"{self.path}: interrupted while waiting for its lock")

    def _clear_expired(self, rules: list[Rule]) -> None:
        """Remove expired locks of other runs (taken over); another taker may remove them first."""
        now = self.clock()
        for lock in find_locks(rules):
            if lock.run != self.holder.run and lock.expired(now):
                self._remove(lock.name, "lock:clear-expired")

    def keep(self) -> None:
        """Before a write: renew the lock when less than half its lease is left."""
        held = self.held
        if held is None:
            raise LockError(f"{self.path}: writing without its lock")
        if held.expires.timestamp() - self.clock() > self.lease / 2:
            return
        renewed = self._add(held.generation + 1, "lock:renew")
        if renewed is None:
            self.held = None
            raise LockError(f"{self.path}: its lock expired and another run took it over; stopped writing")
        self.held = renewed
        self._remove(held.name, "lock:renew")

    def release(self) -> None:
        """Remove our lock. When that fails the client's error is raised and ``held`` still says
        which lock is left (it expires by itself)."""
        if self.held is not None:
            self._remove(self.held.name, "lock:release")
            self.held = None
