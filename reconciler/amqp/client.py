"""The Service Bus `$management` client: typed operations over the request pipeline.

Each method builds its request, hands it to the pipeline (``reconciler.namespace.pipeline``: pacing,
retries, completions) over one pipelined AMQP connection (``engine.py``), and reads the response. Every
method is safe to call from many threads at once; ``list_rules_many`` pipelines a whole batch from
the calling thread. Request and response shapes follow docs/protocol.md §1-§9 (keys and AMQP types
exactly). The typed operations report what came back: whether a failure after a retry means an
earlier attempt took effect is for the caller to decide (apply does).
"""

from __future__ import annotations

from reconciler.amqp.messaging import MessageOperations
from reconciler.amqp.rules import RuleOperations


class ManagementClient(RuleOperations, MessageOperations):
    """Typed `$management` operations for one namespace (use as a context manager): the rules of
    subscriptions (``rules.py``) and messages and sessions (``messaging.py``), over one pipelined
    connection (``requests.py``).

    ``pacer`` may be shared with the namespace's other clients (the REST client) so that one
    budget covers them all; by default the client has its own, with ``window`` and ``max_rate``.
    """
