"""Desired vs live rules → a Plan (pure data), shaped after alembic's autogenerate.

- :mod:`.signature`: normal forms, what of a rule is compared (and the fingerprint of a rule set);
- :mod:`.ops`: the plan as data (Change, SubscriptionPlan, Plan) and its versioned JSON;
- :mod:`.compare`: the per-subscription set algebra and a reason per changed field;
- :mod:`.render`: text, Markdown, JSON and drift views of a plan;
- :mod:`.live`: a plan against the namespace (discovery, missing and undeclared subscriptions, reading).
"""

from reconciler.limits import is_temp_rule_name
from reconciler.plan.compare import compute_plan, lookalike_warnings, partition, plan_subscription
from reconciler.plan.ops import (
    PLAN_FORMAT_VERSION,
    TEMP_SUFFIX,
    Change,
    ChangeKind,
    DriftKind,
    Plan,
    PlanError,
    Skipped,
    SubscriptionPlan,
    read_plan_file,
    temp_rule_name,
)
from reconciler.plan.render import (
    RENDERERS,
    render_drift_json,
    render_drift_text,
    render_json,
    render_markdown,
    render_text,
)
from reconciler.plan.signature import FilterKind, Signature, fingerprint, same_rule, signature

__all__ = [
    "PLAN_FORMAT_VERSION",
    "RENDERERS",
    "TEMP_SUFFIX",
    "Change",
    "ChangeKind",
    "DriftKind",
    "FilterKind",
    "Plan",
    "PlanError",
    "Signature",
    "Skipped",
    "SubscriptionPlan",
    "compute_plan",
    "fingerprint",
    "is_temp_rule_name",
    "lookalike_warnings",
    "partition",
    "plan_subscription",
    "read_plan_file",
    "render_drift_json",
    "render_drift_text",
    "render_json",
    "render_markdown",
    "render_text",
    "same_rule",
    "signature",
    "temp_rule_name",
]
