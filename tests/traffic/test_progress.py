"""A traffic report tells its phases on stderr: plain lines in order when stderr is no terminal
(captured from a real Spark run), and one live line on a pseudo-terminal that ends finished with a
newline; stdout keeps the report alone."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests import processes
from tests.traffic import gaps

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TIME = r"\d+\.\d s"


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    rules, _ = gaps.write(tmp_path_factory.mktemp("shop"))
    return rules.parents[1]


def _phases(err: str) -> list[str]:
    """stderr's lines with their times as TIME (the wording checked, not the clock)."""
    return [re.sub(r"\d+\.\d s", "TIME", line) for line in err.splitlines()]


def test_analyze_tells_its_phases_as_plain_lines_and_stdout_stays_one_document(spark, run_cli, monkeypatch, shop):
    monkeypatch.chdir(shop)
    code, out, err = run_cli(
        "analyze", "rules/shop.yaml", "--traffic", "samples/shop", "--format", "json", "--spark-master", "local[2]"
    )
    assert code == 0, err
    json.loads(out)
    assert _phases(err) == [
        "using Spark (local[2])…",  # the tests' session runs already; `sbrules` itself starts one
        "reading 20 messages… (after TIME)",
        "evaluating 11 filters over 1 topic… (after TIME)",
        "looking for near misses of 1 rule that matched nothing… (after TIME)",  # shop/eu-orders/mars
        "finding the example messages… (after TIME)",
        "writing the report… (after TIME)",
        "done in TIME",
    ]


def test_impact_ends_its_phases_before_saying_where_the_report_went(spark, run_cli, monkeypatch, shop, tmp_path):
    monkeypatch.chdir(shop)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format_version": 2, "summary": {"create": 0, "replace": 0, "delete": 0, "unchanged": 0},
                                "changes": [], "subscriptions": []}))
    out_file = tmp_path / "impact.md"
    code, out, err = run_cli(
        "impact", plan, "rules/shop.yaml", "--traffic", "samples/shop", "--format", "markdown", "--out", out_file,
        "--spark-master", "local[2]",
    )
    assert code == 0, err
    assert out == ""
    lines = _phases(err)
    assert lines[0] == "using Spark (local[2])…" and lines[1] == "reading 20 messages… (after TIME)"
    assert lines[-3:] == ["writing the report… (after TIME)", "done in TIME", f"wrote the traffic report to {out_file}"]


def test_a_failing_report_says_where_it_stopped_before_its_one_error_line(spark, run_cli, monkeypatch, shop, tmp_path):
    monkeypatch.chdir(shop)
    other = tmp_path / "other.yaml"
    other.write_text("topic: payments\nsubscriptions:\n  all:\n    rules:\n      - {name: all, filter: true}\n")
    code, out, err = run_cli("analyze", other, "--traffic", "samples/shop", "--spark-master", "local[2]")
    assert code == 1 and out == ""
    lines = _phases(err)
    assert lines[-2:] == [
        "stopped after TIME",
        "error: the sample holds no messages of the declared topics (payments); sample them first",
    ]


def test_on_a_terminal_the_phases_are_one_live_line_finished_with_a_newline(shop, tmp_path):
    """A fresh ``sbrules analyze`` (its own JVM) with stderr on a pseudo-terminal and stdout in a file."""
    controller, terminal = pty.openpty()
    termios.tcsetwinsize(terminal, (24, 100))
    stdout = (tmp_path / "stdout.json").open("wb")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"}
    process = processes.spawn(
        [sys.executable, "-m", "reconciler", "analyze", "rules/shop.yaml", "--traffic", "samples/shop",
         "--format", "json", "--spark-master", "local[1]"],
        cwd=shop, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=terminal,
    )
    os.close(terminal)
    stdout.close()
    seen = bytearray()
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    try:
        process.wait(timeout=120)
    finally:
        processes.end(process)
    os.close(controller)
    assert process.returncode == 0, seen.decode(errors="replace")
    json.loads((tmp_path / "stdout.json").read_text())
    text = seen.decode().replace("\r\n", "\n")  # the terminal's own newline translation
    assert text.endswith("\n"), repr(text[-200:])
    lines = text.split("\n")[:-1]
    assert len(lines) == 1, repr(text)  # every phase on one line, rewritten in place
    (line,) = lines
    drawn = line.split("\r\x1b[K")
    assert drawn[0] == "" and all(drawn[1:]), repr(line)  # every state of the line starts with \r and clear-to-end
    shown = [re.sub(r"\d+\.\d s", "TIME", state) for state in drawn[1:]]
    assert shown[-1] == "writing the report… done in TIME"
    phases = list(dict.fromkeys(shown[:-1]))  # a phase is redrawn as its clock runs
    assert phases == [
        "starting Spark (local[1])… TIME",
        "reading 20 messages… TIME",
        "evaluating 11 filters over 1 topic… TIME",
        "looking for near misses of 1 rule that matched nothing… TIME",
        "finding the example messages… TIME",
        "writing the report… TIME",
    ]
