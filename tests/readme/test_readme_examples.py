"""The command examples of every page (the README, CONTRIBUTING.md, docs/) run, and print what the
page shows (modulo paths, ports and timings; `…` elides, see examples.py). Each runs in a fresh
directory holding a copy of the shipped rules/, with `sbrules` from this environment; fixtures named
on the page set up the rest."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from .examples import Example, explain, matches, normalise, parse
from .pages import PAGES, REPO, name

EXAMPLES: list[tuple[Path, Example]] = [
    (page, example) for page in PAGES for example in parse(page.read_text(encoding="utf-8"))
]
MARK = "@@readme-example-command@@"


# ------------------------------------------------------------------------------------------------
# Fixtures an example can name (CONTRIBUTING.md: "Contributor notes")
# ------------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """Where an example runs: its directory, its environment, and what its fixtures started."""

    page: Path  #: the page the example is on
    workdir: Path
    env: dict[str, str]
    stack: contextlib.ExitStack
    emulator: Any = None


def broken_sql(setup: Setup) -> None:
    """A typo in rules/orders.yaml: the high-value rule's SQL says `AND AND`."""
    path = setup.workdir / "rules" / "orders.yaml"
    text = path.read_text(encoding="utf-8")
    typo = text.replace("amount > 1000 AND currency", "amount > 1000 AND AND currency", 1)
    assert typo != text, "the high-value rule changed: update the broken-sql fixture"
    path.write_text(typo, encoding="utf-8")


def emulator(setup: Setup) -> None:
    """$SERVICEBUS_CONNECTION_STRING points at an emulator seeded as `sbrules demo` seeds it: the
    shipped rules, drifted in each way a plan can show."""
    from reconciler.demo import drifted_namespace
    from reconciler.emulator import Emulator
    from reconciler.rulefiles import load_paths

    live, _ = drifted_namespace(load_paths([setup.workdir / "rules"]))
    setup.emulator = setup.stack.enter_context(Emulator(live))
    setup.env["SERVICEBUS_CONNECTION_STRING"] = setup.emulator.connection_string


def traffic(setup: Setup) -> None:
    """(after emulator) The demo's traffic is published: 300 orders, then 300 payments."""
    from reconciler.demo.traffic import publish_sample_traffic

    assert setup.emulator is not None, "the traffic fixture needs the emulator fixture before it"
    publish_sample_traffic(setup.emulator, ["orders", "payments"])


def environments(setup: Setup) -> None:
    """The page's environment example: each ```yaml block whose first line is ``# rules/PATH``
    is written to that path (sbrules.yaml, a base file using variables, a prod overlay)."""
    blocks = re.findall(r"^```yaml\n# (rules/[^\n]+)\n(.*?)^```", setup.page.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks, f"{name(setup.page)} has no ```yaml block starting with # rules/...: update the environments fixture"
    for target, body in blocks:
        path = setup.workdir / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")


def examples(setup: Setup) -> None:
    """docs/examples/ in examples/; after the emulator fixture, its CA certificate in emulator-ca.pem
    (what `sbrules emulator --ca-file emulator-ca.pem` writes), for Microsoft's SDK to trust."""
    shutil.copytree(REPO / "docs" / "examples", setup.workdir / "examples")
    if setup.emulator is not None:
        setup.emulator.write_ca(setup.workdir / "emulator-ca.pem")


def shop(setup: Setup) -> None:
    """rules/shop.yaml and the Parquet sample samples/shop of tests/traffic/gaps.py (no namespace)."""
    from tests.traffic import gaps

    gaps.write(setup.workdir)


FIXTURES: dict[str, Callable[[Setup], None]] = {
    "broken-sql": broken_sql,
    "shop": shop,
    "environments": environments,
    "emulator": emulator,
    "traffic": traffic,
    "examples": examples,
}


@contextlib.contextmanager
def prepared(page: Path, example: Example, workdir: Path) -> Iterator[Setup]:
    """A copy of the shipped rules/ in ``workdir``, this environment's `sbrules` first on PATH, no
    colours, and the example's fixtures; yields what they set up (``env``: to run the commands with)."""
    shutil.copytree(REPO / "rules", workdir / "rules")
    env = {k: v for k, v in os.environ.items() if k != "SERVICEBUS_CONNECTION_STRING"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
        TERM="dumb",
    )
    with contextlib.ExitStack() as stack:
        setup = Setup(page, workdir, env, stack)
        for name in example.fixtures:
            FIXTURES[name](setup)
        yield setup


def run(example: Example, workdir: Path, env: dict[str, str]) -> list[tuple[str, ...]]:
    """Each command's output (stdout and stderr as a terminal interleaves them), in one shell, so
    that `export` and files carry over from one command to the next."""
    script = "".join(f"echo '{MARK}'\n{command.text}\n" for command in example.commands)
    done = subprocess.run(
        ["bash", "-c", script], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
    )
    outputs = done.stdout.split(MARK + "\n")[1:]
    assert len(outputs) == len(example.commands), done.stdout
    return [tuple(out.splitlines()) for out in outputs]


#: Fixtures whose examples a test of their own runs (slow): test_coexistence_guide.py.
OWN_TEST = {"examples"}


def _params() -> list:
    params = []
    for page, example in EXAMPLES:
        if OWN_TEST & set(example.fixtures):
            continue
        marks = [pytest.mark.spark] if {"traffic", "shop"} & set(example.fixtures) else []
        if example.skip:
            marks.append(pytest.mark.skip(reason=f"{name(page)} says: {example.skip}"))
        params.append(pytest.param(page, example, id=f"{name(page)}:{example.id}", marks=marks))
    return params


@pytest.mark.parametrize(("page", "example"), _params())
def test_documented_example(page: Path, example: Example, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    with prepared(page, example, workdir) as setup:
        outputs = run(example, workdir, setup.env)
    failures = []
    for command, output in zip(example.commands, outputs):
        expected = normalise(command.expected)
        actual = normalise(output, str(workdir))
        if not matches(expected, actual):
            failures.append(f"{name(page)}: " + explain(command, expected, actual))
    assert not failures, "\n\n".join(failures)


@pytest.mark.unit
def test_examples_are_well_formed():
    assert EXAMPLES, "no ```console examples in the documentation"
    problems = [f"{name(page)} line {e.line}: {p}" for page, e in EXAMPLES for p in e.problems]
    problems += [
        f"{name(page)} line {e.line}: unknown fixture {fixture!r} (known: {', '.join(FIXTURES)})"
        for page, e in EXAMPLES
        for fixture in e.fixtures
        if fixture not in FIXTURES
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.unit
def test_prompts_only_appear_in_console_examples():
    """A `$ ` line in a ```sh or plain block is an example nobody runs: make it a ```console block."""
    stray = []
    for page in PAGES:
        fence = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
            elif fence is not None and fence != "console" and line.startswith("$ "):
                stray.append(f"{name(page)} line {number} (```{fence}): {line}")
    assert not stray, "\n".join(stray)


@pytest.mark.unit
def test_the_elision_rule():
    assert matches(("a", "…", "d"), ("a", "d"))
    assert matches(("a", "…", "d"), ("a", "b", "c", "d"))
    assert not matches(("a", "…", "d"), ("a", "b", "c"))
    assert matches(("x = …;",), ("x = 1 + 2;",))
    assert not matches(("x = …;",), ("x = 1", "2;"))
    assert not matches(("a",), ("a", "b")), "without …, extra lines are a difference"
    assert normalise(("sb://127.0.0.1:40123 took 0.25 s", "", "/tmp/w/rules/x.yaml"), "/tmp/w") == (
        "sb://127.0.0.1:<port> took <duration>",
        "",
        "rules/x.yaml",
    )
