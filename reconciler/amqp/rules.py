"""The rule operations of `$management` (docs/protocol.md): enumerate-rules in pages, add-rule, remove-rule."""

from __future__ import annotations

from collections.abc import Sequence

from proton import int32

from reconciler import model
from reconciler.amqp import codec
from reconciler.amqp.requests import OP_PREFIX, ManagementRequests, entity_path
from reconciler.namespace.errors import ManagementError
from reconciler.namespace.pipeline import OnAttempt

RULES_PAGE_SIZE = 100
#: Enumerate-rules pages pipelined (and held) at once by list_rules_many; many times any window.
RULES_BATCH = 256
ENUMERATE_RULES = OP_PREFIX + "enumerate-rules"


class RuleOperations(ManagementRequests):
    """A subscription's rules: read (pipelined over many subscriptions), created and deleted."""

    def list_rules(
        self, topic: str, subscription: str, *, on_attempt: OnAttempt | None = None
    ) -> list[model.Rule]:
        """All rules of a subscription (enumerate-rules, 100 per page until a short page or 204)."""
        result = self.list_rules_many([(topic, subscription)], window=1, on_attempt=on_attempt)[0]
        if isinstance(result, ManagementError):
            raise result
        return result

    def list_rules_many(
        self, targets: Sequence[tuple[str, str]], *, window: int | None = None, on_attempt: OnAttempt | None = None
    ) -> list[list[model.Rule] | ManagementError]:
        """The rules of every (topic, subscription), pipelined; per target its rules or its error.

        Pages are read in rounds: every target's first page, then the next page of those whose
        page was full (100 rules). A round is pipelined in batches of :data:`RULES_BATCH` pages,
        each decoded into rules before the next is sent, so that the raw pages in memory at once
        stay bounded (all of 2,000 subscriptions' pages at once were 100 MB more at the peak).
        """
        rules: list[list[model.Rule]] = [[] for _ in targets]
        results: list[list[model.Rule] | ManagementError] = list(rules)
        todo = list(range(len(targets)))
        while todo:
            full = []
            for start in range(0, len(todo), RULES_BATCH):
                full += self._read_pages(targets, todo[start:start + RULES_BATCH], rules, results, window, on_attempt)
            todo = full
        return results

    def _read_pages(
        self,
        targets: Sequence[tuple[str, str]],
        batch: list[int],
        rules: list[list[model.Rule]],
        results: list[list[model.Rule] | ManagementError],
        window: int | None,
        on_attempt: OnAttempt | None,
    ) -> list[int]:
        """The next page of each target in ``batch``, added to ``rules`` (errors to ``results``);
        returns the targets whose page was full."""
        calls = [
            (entity_path(*targets[i]), ENUMERATE_RULES, {"top": int32(RULES_PAGE_SIZE), "skip": int32(len(rules[i]))})
            for i in batch
        ]
        responses = self.request_all(calls, ok=(200, 204), window=window, on_attempt=on_attempt)
        full = []
        for index, response in zip(batch, responses):
            if isinstance(response, ManagementError):
                results[index] = response
                continue
            if response.status == 204 or response.body is None:
                continue
            try:
                page = codec.decode_enumerate_rules_body(response.body, offset=len(rules[index]))
            except codec.CodecError as exc:
                raise codec.CodecError(f"{'/'.join(targets[index])}: {exc}") from None
            rules[index].extend(page)
            if len(page) == RULES_PAGE_SIZE:
                full.append(index)
        return full

    def add_rule(
        self, topic: str, subscription: str, rule: model.Rule, *, on_attempt: OnAttempt | None = None
    ) -> None:
        """Create ``rule``; raises AlreadyExistsError when a rule of that name exists (its
        ``after_retry`` says whether an earlier attempt of this call may have created it)."""
        self.request(
            entity_path(topic, subscription), OP_PREFIX + "add-rule", codec.encode_add_rule_body(rule),
            on_attempt=on_attempt,
        )

    def remove_rule(
        self, topic: str, subscription: str, name: str, *, on_attempt: OnAttempt | None = None
    ) -> None:
        """Delete the rule ``name``; raises NotFoundError when there is none (``after_retry`` as for add_rule)."""
        self.request(
            entity_path(topic, subscription), OP_PREFIX + "remove-rule", {"rule-name": name}, on_attempt=on_attempt
        )
