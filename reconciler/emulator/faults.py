"""Injected faults for reliability tests: latency, server-busy answers, dropped connections, refused CBS,
and the credit-based throttling of a Standard namespace (``throttling.py``).

Off by default. Set them from a faults file (YAML or JSON, keys = the field names below) or at
run time through ``Emulator.faults``; the server reads the current values on every request, so a
test can switch a fault on and off while clients stay connected. Randomness comes from a seeded
RNG so a failing reliability test replays the same way.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.namespace.credits import SERVICE_COSTS, THROTTLED_WAIT_SECONDS, CreditCosts

_COST_KINDS = tuple(f.name for f in fields(CreditCosts))


class FaultsFileError(SbrulesError):
    """A faults file that cannot be read or names unknown faults."""

    code = ErrorCode.INPUT


@dataclass
class Faults:
    """Current fault settings (mutable; thread-safe enough for flag and number updates)."""

    #: Seconds added before every management response (AMQP `$management` and the REST API).
    latency: float = 0.0
    #: Fraction (0..1) of management requests answered 503 com.microsoft:server-busy.
    busy_fraction: float = 0.0
    #: Close each connection after this many operations (management requests + transfers); None = never.
    close_after_ops: int | None = None
    #: Management operations (``add-rule``, ``com.microsoft:remove-rule``…) the emulator carries out
    #: and then, instead of answering, closes the connection: a change whose answer never came.
    drop_after_applying: list[str] = field(default_factory=list)
    #: Management operations at which the emulator closes the connection without carrying them out.
    drop_before_applying: list[str] = field(default_factory=list)
    #: Answer every CBS put-token with 401 (authentication outage).
    refuse_cbs: bool = False
    #: At most this many messages per peek, whatever was asked: the service may return fewer
    #: messages than a peek asks for even when more are there. None = as many as asked.
    peek_limit: int | None = None
    #: Credit-based throttling: the namespace's credits per second (a Standard namespace has 1000);
    #: None = none, as on Premium.
    credits_per_second: float | None = None
    #: What each kind of operation costs (management, message, filter_evaluation); unnamed kinds
    #: cost what they cost at the service.
    credit_costs: dict[str, int] = field(default_factory=dict)
    #: The wait a throttled answer asks for ("Please wait 2 seconds and try again").
    throttled_wait_seconds: float = THROTTLED_WAIT_SECONDS
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False, compare=False)
    _lock: threading.Lock = field(init=False, repr=False, compare=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.validate()
        self._rng = random.Random(self.seed)

    def validate(self) -> None:
        if not 0.0 <= float(self.busy_fraction) <= 1.0:
            raise FaultsFileError(f"busy_fraction must be between 0 and 1, got {self.busy_fraction}")
        if float(self.latency) < 0:
            raise FaultsFileError(f"latency must be >= 0 seconds, got {self.latency}")
        for name in ("drop_after_applying", "drop_before_applying"):
            ops = getattr(self, name)
            if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
                raise FaultsFileError(f"{name} must be a list of management operation names, got {ops!r}")
        if self.close_after_ops is not None and int(self.close_after_ops) < 1:
            raise FaultsFileError(f"close_after_ops must be >= 1, got {self.close_after_ops}")
        if self.peek_limit is not None and int(self.peek_limit) < 1:
            raise FaultsFileError(f"peek_limit must be >= 1 (or null: as many as asked), got {self.peek_limit}")
        if self.credits_per_second is not None and float(self.credits_per_second) <= 0:
            raise FaultsFileError(f"credits_per_second must be > 0 (or null: no throttling), got {self.credits_per_second}")
        if float(self.throttled_wait_seconds) < 0:
            raise FaultsFileError(f"throttled_wait_seconds must be >= 0, got {self.throttled_wait_seconds}")
        if not isinstance(self.credit_costs, Mapping):
            raise FaultsFileError(f"credit_costs must map operation kinds to credits, got {self.credit_costs!r}")
        unknown = set(self.credit_costs) - set(_COST_KINDS)
        if unknown:
            raise FaultsFileError(
                f"unknown credit_costs: {', '.join(sorted(map(str, unknown)))} (known: {', '.join(_COST_KINDS)})"
            )
        for kind, cost in self.credit_costs.items():
            if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
                raise FaultsFileError(f"credit_costs.{kind} must be a whole number of credits >= 0, got {cost!r}")

    @property
    def costs(self) -> CreditCosts:
        """The price list the emulator charges by."""
        return replace(SERVICE_COSTS, **self.credit_costs)

    def reseed(self, seed: int) -> None:
        with self._lock:
            self.seed = seed
            self._rng = random.Random(seed)

    def server_busy(self) -> bool:
        """Draw whether this management request is answered 503."""
        if self.busy_fraction <= 0:
            return False
        with self._lock:
            return self._rng.random() < self.busy_fraction

    def drops(self, operation: object, when: str) -> bool:
        """Whether to close the connection ``when`` ("before" or "after") carrying out ``operation``."""
        ops = self.drop_before_applying if when == "before" else self.drop_after_applying
        return bool(ops) and str(operation).removeprefix("com.microsoft:") in {op.removeprefix("com.microsoft:") for op in ops}

    def update(self, **settings: Any) -> None:
        """Change several faults at once (unknown names are an error)."""
        known = {f.name for f in fields(self) if not f.name.startswith("_")}
        unknown = set(settings) - known
        if unknown:
            raise FaultsFileError(f"unknown faults: {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        for name, value in settings.items():
            if name == "seed":
                self.reseed(int(value))
            else:
                setattr(self, name, value)
        self.validate()

    def clear(self) -> None:
        self.update(
            latency=0.0, busy_fraction=0.0, close_after_ops=None, refuse_cbs=False, peek_limit=None, credits_per_second=None,
            credit_costs={}, throttled_wait_seconds=THROTTLED_WAIT_SECONDS, drop_after_applying=[], drop_before_applying=[],
        )

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> "Faults":
        faults = cls()
        faults.update(**dict(doc))
        return faults

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Faults":
        """Read a YAML or JSON faults file (JSON is YAML); a problem is one line naming its place."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FaultsFileError(f"cannot read faults file {path}: {exc}") from None
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            doc = yaml.safe_load(text) or {}
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            raise FaultsFileError(f"{where}: malformed YAML: {exc.problem or exc.context}") from None
        except yaml.YAMLError as exc:
            raise FaultsFileError(f"{path}: malformed YAML: {exc}") from None
        if not isinstance(doc, Mapping):
            raise FaultsFileError(f"{path}:1:1: a faults file holds a map of fault settings")
        try:
            return cls.from_mapping(doc)
        except (TypeError, ValueError, FaultsFileError) as exc:
            raise FaultsFileError(_culprit(path, node, doc) or f"{path}:1:1: {exc}") from None


def _culprit(path: str | os.PathLike[str], node: yaml.Node | None, doc: Mapping[str, Any]) -> str | None:
    """``path:line:column: name: why`` of the first setting that is refused on its own, or None."""
    keys = {str(key.value): key.start_mark for key, _ in node.value} if isinstance(node, yaml.MappingNode) else {}
    for key, value in doc.items():
        try:
            Faults.from_mapping({key: value})
        except (TypeError, ValueError, FaultsFileError) as exc:
            mark = keys.get(str(key))
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}:1:1"
            return f"{where}: {key}: {exc}"
    return None
