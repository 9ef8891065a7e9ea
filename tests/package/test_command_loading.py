"""Commands load on first use, and loading hides nothing: a broken import is a crash, not a message.

A module of sbrules that fails to import is a bug in the build. It must end in its traceback, never
in a message that makes it look like a missing feature ("not yet available") or a lint warning.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from reconciler.cli import COMMANDS, cli

REPO = Path(__file__).resolve().parents[2]


def _run_python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_every_command_loads_as_itself() -> None:
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert set(COMMANDS) <= set(names)
    for name in names:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command), name
        assert command.name == name and command.help, name


def test_help_lists_every_command_without_loading_amqp_or_spark() -> None:
    done = _run_python(
        "import sys\n"
        "from reconciler.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = sorted({'proton', 'pyspark', 'pyarrow'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert listed == set(COMMANDS)


@pytest.mark.parametrize(
    ("argv", "broken"),
    [
        (["validate", "rules"], "reconciler.sql"),  # through lint.py, which once hid it as 'sql-unchecked'
        (["plan", "rules"], "reconciler.plan"),
        (["sql", "check", "a = 1"], "reconciler.sql.parser"),
        (["demo", "--no-traffic"], "reconciler.demo"),
    ],
    ids=["validate", "plan", "sql-check", "demo"],
)
def test_a_module_that_cannot_be_imported_is_a_crash_with_its_traceback(argv: list[str], broken: str) -> None:
    done = _run_python(
        "import sys\n"
        f"sys.modules[{broken!r}] = None  # what a missing or broken module looks like to an import\n"
        "from reconciler.cli import main\n"
        f"main({argv!r})\n"
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback (most recent call last)" in done.stderr
    assert f"ModuleNotFoundError: import of {broken} halted" in done.stderr
    assert "not yet available" not in done.stderr + done.stdout
    assert "sql-unchecked" not in done.stderr + done.stdout


def test_a_command_that_reads_no_rule_files_loads_no_sql_or_lint() -> None:
    # The use cases are one module (reconciler.app.operations): what only some of them need loads with them.
    done = _run_python(
        "import sys\n"
        "from reconciler.cli import main\n"
        "try:\n"
        "    main(['topics', '--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "assert 'reconciler.app.operations' in sys.modules\n"
        "heavy = sorted({'reconciler.lint', 'reconciler.sql.parser', 'proton'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    assert done.returncode == 0, done.stderr
