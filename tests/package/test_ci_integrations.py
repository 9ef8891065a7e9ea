"""The GitHub action, the Azure Pipelines template and the pre-commit hook, run for real: their shell
steps as a script (the platform's own steps, setup-python and UsePythonVersion, left out) in a
throwaway rules repository, and the hook with pre-commit itself against this repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reconciler.demo import drifted_namespace
from reconciler.emulator import Emulator
from reconciler.rulefiles import load_paths

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def python_env(tmp_path_factory) -> dict[str, str]:
    """A fresh venv first on PATH, as setup-python leaves a runner: the install step fills it."""
    venv = tmp_path_factory.mktemp("runner") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICEBUS_", "SBRULES_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return env


@pytest.fixture
def rules_repo(tmp_path) -> Path:
    repo = tmp_path / "team-rules"
    shutil.copytree(REPO / "rules", repo / "rules")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


@pytest.fixture(scope="module")
def emulator():
    live, _ = drifted_namespace(load_paths([REPO / "rules"]))
    with Emulator(live) as emu:
        yield emu


def _run_steps(steps: list[dict], expand, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Each shell step in turn, with its env, as the runner runs it; stops at the first failure."""
    done = None
    for step in steps:
        if "run" not in step and "script" not in step:
            continue  # a platform step (setup-python, UsePythonVersion)
        step_env = dict(env)
        step_env.update({name: expand(str(value)) for name, value in (step.get("env") or {}).items()})
        done = subprocess.run(["bash", "-e", "-c", expand(step.get("run") or step["script"])], cwd=cwd, env=step_env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return done
    assert done is not None
    return done


def _action(inputs: dict[str, str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    unknown = set(inputs) - set(values)
    assert not unknown, f"the action has no inputs {unknown}"
    values.update(inputs)

    def expand(text: str) -> str:
        text = text.replace("${{ github.action_path }}", str(REPO))
        return re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: values[m.group(1)], text)

    files = {name: cwd.parent / f"{name}.txt" for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
    for path in files.values():
        path.write_text("")
    done = _run_steps(action["runs"]["steps"], expand, {**env, **{k: str(v) for k, v in files.items()}, "RUNNER_TEMP": str(cwd.parent)}, cwd)
    outputs = dict(line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)
    outputs["summary"] = files["GITHUB_STEP_SUMMARY"].read_text()
    return done, outputs


def test_the_action_validates_and_plans_a_rules_repository(python_env, rules_repo, emulator):
    done, outputs = _action({"command": "validate", "format": "markdown"}, python_env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["exit-code"] == "0" and "does not declare $Default" in outputs["summary"]
    assert Path(outputs["output"]).read_text() == outputs["summary"]

    env = {**python_env, "SERVICEBUS_CONNECTION_STRING": emulator.connection_string}
    done, outputs = _action({"command": "plan", "format": "markdown", "args": "--detailed-exitcode"}, env, rules_repo)
    assert done.returncode == 2 and outputs["exit-code"] == "2", done.stderr  # changes: the gate sees them
    assert "delete rule" in outputs["summary"] or "$Default" in outputs["summary"], outputs["summary"]

    (rules_repo / "rules" / "orders.yaml").write_text("topic: orders\nsubscriptions: {billing: {rules: [{name: x, sql: 'a = = 1'}]}}\n")
    done, outputs = _action({"command": "validate", "format": "github"}, python_env, rules_repo)
    assert done.returncode == 1 and outputs["exit-code"] == "1" and "::error file=rules/orders.yaml" in done.stdout


def test_the_action_and_the_template_run_the_routing_tests(python_env, rules_repo, tmp_path):
    done, outputs = _action({"command": "test", "format": "junit"}, python_env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["exit-code"] == "0" and '<testsuite name="rules/orders.test.yaml" tests="7" failures="0"' in done.stdout

    orders = rules_repo / "rules" / "orders.yaml"
    orders.write_text(orders.read_text().replace("currency = 'EUR'\"", "currency = 'USD'\""))
    template = yaml.safe_load((REPO / "ci" / "azure-pipelines" / "sbrules.yml").read_text())
    values = {p["name"]: str(p.get("default", "")) for p in template["parameters"]}
    values.update(command="test", format="github", sbrulesSpec=str(REPO))

    def expand(text: str) -> str:
        text = re.sub(r"\$\{\{ parameters\.(\w+) \}\}", lambda m: values[m.group(1)], text)
        return text.replace("$(Agent.TempDirectory)", str(tmp_path))

    done = _run_steps(template["steps"], expand, python_env, rules_repo)
    assert done.returncode == 1 and "::error file=rules/orders.test.yaml,line=8,col=5::[test-failed]" in done.stdout


def test_the_azure_pipelines_template_runs_its_steps(python_env, rules_repo, emulator, tmp_path):
    template = yaml.safe_load((REPO / "ci" / "azure-pipelines" / "sbrules.yml").read_text())
    values = {p["name"]: str(p.get("default", "")) for p in template["parameters"]}
    values.update(command="drift", format="json", sbrulesSpec=str(REPO))

    def expand(text: str) -> str:
        text = re.sub(r"\$\{\{ parameters\.(\w+) \}\}", lambda m: values[m.group(1)], text)
        text = text.replace("$(Agent.TempDirectory)", str(tmp_path))
        return text.replace("$(SERVICEBUS_CONNECTION_STRING)", emulator.connection_string)

    done = _run_steps(template["steps"], expand, python_env, rules_repo)
    assert done.returncode == 2, done.stdout + done.stderr  # the demo namespace has drifted
    assert '"in_sync": false' in done.stdout


def test_the_pre_commit_hook_validates_with_pre_commit_itself(rules_repo, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    pre_commit = [sys.executable, "-m", "pre_commit"]
    subprocess.run(["git", "add", "-A"], cwd=rules_repo, check=True)
    done = subprocess.run([*pre_commit, "try-repo", str(REPO), "sbrules-validate", "--all-files"],
                          cwd=rules_repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sbrules validate" in done.stdout and "Passed" in done.stdout

    (rules_repo / "rules" / "orders.yaml").write_text("topic: orders\nsubscriptions: {billing: {rules: [{name: x, sql: 'a = = 1'}]}}\n")
    subprocess.run(["git", "add", "-A"], cwd=rules_repo, check=True)
    done = subprocess.run([*pre_commit, "try-repo", str(REPO), "sbrules-validate", "--all-files"],
                          cwd=rules_repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1 and "Failed" in done.stdout and "error[sql-syntax]" in done.stdout, done.stdout


def test_the_pre_commit_hook_runs_the_routing_tests_with_pre_commit_itself(rules_repo, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    pre_commit = [sys.executable, "-m", "pre_commit"]
    subprocess.run(["git", "add", "-A"], cwd=rules_repo, check=True)
    done = subprocess.run([*pre_commit, "try-repo", str(REPO), "sbrules-test", "--all-files"],
                          cwd=rules_repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "sbrules test" in done.stdout and "Passed" in done.stdout, done.stdout + done.stderr

