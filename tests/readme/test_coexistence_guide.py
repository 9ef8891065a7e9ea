"""The guide Sharing a namespace (docs/coexistence.md) end to end: the framework's start-up script
through Microsoft's SDK, then plan, apply and drift under partial ownership and under the complete
set, each command printing what the page shows; Microsoft's administration client then reads what
the guide left behind. The generic example test leaves these examples to this one."""

from __future__ import annotations

import pytest
from azure.servicebus.management import FalseRuleFilter, ServiceBusAdministrationClient, SqlRuleFilter

from .examples import explain, matches, normalise
from .pages import REPO, name
from .test_readme_examples import EXAMPLES, prepared, run

PAGE = REPO / "docs" / "coexistence.md"


@pytest.mark.slow
def test_the_guide_runs_as_the_page_shows_it(tmp_path):
    (example,) = [e for page, e in EXAMPLES if page == PAGE and "examples" in e.fixtures]
    workdir = tmp_path / "work"
    workdir.mkdir()
    with prepared(PAGE, example, workdir) as setup:
        outputs = run(example, workdir, setup.env)
        emulator = setup.emulator
        with ServiceBusAdministrationClient.from_connection_string(
            emulator.connection_string, connection_verify=emulator.ca_file
        ) as admin:
            left = {rule.name: rule.filter for rule in admin.list_rules("orders", "Sales")}
    failures = [
        explain(command, normalise(command.expected), normalise(output, str(workdir)))
        for command, output in zip(example.commands, outputs)
        if not matches(normalise(command.expected), normalise(output, str(workdir)))
    ]
    assert not failures, f"{name(PAGE)}: " + "\n\n".join(failures)
    # The complete set removed the framework's $Default; its restart added its event rule back.
    assert set(left) == {"team-a-big", "Shop.Messages.OrderPlaced"}
    assert isinstance(left["Shop.Messages.OrderPlaced"], SqlRuleFilter)
    assert not any(isinstance(f, FalseRuleFilter) for f in left.values())

