"""The GitHub action, the Azure Pipelines template and the pre-commit hook, run for real: their shell
steps as a script (the platform's own steps, setup-python and UsePythonVersion, left out) in a
throwaway rules repository, and the hook with pre-commit itself against this repository."""

from __future__ import annotations

import json
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
from tests.package.workflows import REPO, run_action, run_job, run_steps, workflow

# One worker: each install builds sbrules in this checkout's build/ folder, which two builds at once break.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ci-integrations")]



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


def test_the_action_plans_with_changes_as_a_success_and_gates_only_when_told(python_env, rules_repo, emulator):
    done, outputs = run_action({"command": "validate", "format": "markdown"}, python_env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["exit-code"] == "0" and "does not declare $Default" in outputs["summary"]
    assert Path(outputs["output"]).read_text() == outputs["summary"]

    env = {**python_env, "SERVICEBUS_CONNECTION_STRING": emulator.connection_string}
    done, outputs = run_action({"command": "plan", "format": "markdown"}, env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr  # changes are what a pull request is for
    assert outputs["exit-code"] == "2" and outputs["has-changes"] == "true"
    assert "$Default" in outputs["summary"], outputs["summary"]

    done, outputs = run_action({"command": "plan", "format": "markdown", "fail-on-changes": "true"}, env, rules_repo)
    assert done.returncode == 2 and outputs["has-changes"] == "true"  # the gate, when asked for

    (rules_repo / "rules" / "orders.yaml").write_text("topic: orders\nsubscriptions: {billing: {rules: [{name: x, sql: 'a = = 1'}]}}\n")
    done, outputs = run_action({"command": "validate", "format": "github"}, python_env, rules_repo)
    assert done.returncode == 1 and outputs["exit-code"] == "1" and "::error file=rules/orders.yaml" in done.stdout
    done, outputs = run_action({"command": "plan", "format": "markdown"}, env, rules_repo)
    assert done.returncode == 1 and outputs["has-changes"] == "false"  # an error fails the step


def test_the_action_and_the_template_run_the_routing_tests(python_env, rules_repo, tmp_path):
    done, outputs = run_action({"command": "test", "format": "junit"}, python_env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["exit-code"] == "0" and '<testsuite name="rules/orders.test.yaml" tests="7" failures="0"' in done.stdout

    orders = rules_repo / "rules" / "orders.yaml"
    orders.write_text(orders.read_text().replace("currency = 'EUR'\"", "currency = 'USD'\""))
    done = _run_template(python_env, rules_repo, tmp_path, {}, command="test", format="github")
    assert done.returncode == 1 and "::error file=rules/orders.test.yaml,line=8,col=5::[test-failed]" in done.stdout


def test_the_documented_workflow_gives_each_job_the_outcome_its_docs_promise(python_env, rules_repo, tmp_path):
    flow = workflow(REPO / "docs" / "ci.md", "# .github/workflows/sbrules.yml")
    live, _ = drifted_namespace(load_paths([REPO / "rules"]))
    with Emulator(live) as emu:
        secrets = {"SERVICEBUS_CONNECTION_STRING": emu.connection_string}

        pull_request = run_job(flow, "plan", secrets=secrets, env=python_env, cwd=rules_repo)
        assert pull_request.success, pull_request.log
        assert pull_request.outputs["plan"]["has-changes"] == "true"
        assert "marocchino/sticky-pull-request-comment@v2" in pull_request.ran  # the comment, from the output file
        assert "$Default" in Path(pull_request.outputs["plan"]["output"]).read_text()
        assert json.loads((rules_repo / "plan.json").read_text())["changes"]  # the artefact

        nightly = run_job(flow, "drift", secrets=secrets, env=python_env, cwd=rules_repo)
        assert not nightly.success and "actions/upload-artifact@v4" in nightly.ran  # drift fails the job, by design

        merge = run_job(flow, "apply", secrets=secrets, env=python_env, cwd=rules_repo)
        assert merge.success, merge.log
        assert (rules_repo / "apply-journal.jsonl").read_text()

        nightly = run_job(flow, "drift", secrets=secrets, env=python_env, cwd=rules_repo)
        assert nightly.success and "actions/upload-artifact@v4" not in nightly.ran, nightly.log

    (rules_repo / "rules" / "orders.yaml").write_text("topic: orders\nsubscriptions: {billing: {rules: [{name: x, sql: 'a = = 1'}]}}\n")
    broken = run_job(flow, "plan", secrets={"SERVICEBUS_CONNECTION_STRING": "unused"}, env=python_env, cwd=rules_repo)
    assert not broken.success and "plan" not in broken.ran  # validate stopped the job: no plan, no comment, no artefact
    assert broken.ran == ["actions/checkout@v4", "<owner>/sbrules@v0.1.0"]


def test_apply_takes_a_saved_plan_through_its_plan_input_never_as_rule_files(python_env, rules_repo):
    live, _ = drifted_namespace(load_paths([REPO / "rules"]))
    with Emulator(live) as own:  # its own namespace: the module's stays drifted for the other tests
        env = {**python_env, "SERVICEBUS_CONNECTION_STRING": own.connection_string}
        done, _ = run_action({"command": "plan", "out": "reviewed.json"}, env, rules_repo)
        assert done.returncode == 0, done.stderr
        done, outputs = run_action({"command": "apply", "plan": "reviewed.json"}, env, rules_repo)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "unknown key" not in done.stdout + done.stderr
        done, outputs = run_action({"command": "drift"}, env, rules_repo)
        assert done.returncode == 0 and outputs["has-changes"] == "false", done.stdout


def test_extras_come_from_the_actions_own_ref(python_env, rules_repo):
    done, _ = run_action({"command": "validate", "extras": "entra"}, python_env, rules_repo)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = subprocess.run(["python", "-c", "import azure.identity, reconciler; print(reconciler.__file__)"],
                           env=python_env, cwd=rules_repo, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert str(REPO) not in probe.stdout  # installed from the ref's checkout, not run from it


def test_the_azure_pipelines_template_installs_its_own_checkout_and_maps_an_environments_secret(
    python_env, rules_repo, emulator, tmp_path
):
    (rules_repo / "rules" / "sbrules.yaml").write_text("environments:\n  prod:\n    connection_string_env: PROD_SERVICEBUS\n")
    variables = {"PROD_SERVICEBUS": emulator.connection_string}

    def run(**parameters: object) -> subprocess.CompletedProcess[str]:
        return _run_template(python_env, rules_repo, tmp_path, variables, **parameters)

    done = run(command="plan", path="rules", environment="prod", format="markdown", env={"PROD_SERVICEBUS": "$(PROD_SERVICEBUS)"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "##vso[task.setvariable variable=hasChanges;isOutput=true]true" in done.stdout
    done = run(command="drift", path="rules", environment="prod", format="json", env={"PROD_SERVICEBUS": "$(PROD_SERVICEBUS)"})
    assert done.returncode == 2 and '"in_sync": false' in done.stdout  # drift fails the job, by design
    done = run(command="plan", path="rules", environment="prod")  # the secret not mapped: a usage error
    assert done.returncode == 64, done.stdout + done.stderr
    assert "PROD_SERVICEBUS" in done.stderr


def _run_template(python_env: dict[str, str], rules_repo: Path, tmp_path: Path, variables: dict[str, str],
                  **parameters: object) -> subprocess.CompletedProcess[str]:
    """The Azure Pipelines template's script steps with these parameters, as an agent with two
    checkouts (the rules repository and sbrules at its tag) and these pipeline variables runs them."""
    template = yaml.safe_load((REPO / "ci" / "azure-pipelines" / "sbrules.yml").read_text())
    sources = tmp_path / "s"
    if not sources.exists():
        sources.mkdir()
        (sources / "sbrules").symlink_to(REPO)  # `checkout: sbrules` of the tag
        (sources / "team-rules").symlink_to(rules_repo)
    pipeline_variables = {**variables, "Build.SourcesDirectory": str(sources), "Build.Repository.Name": "team-rules",
                          "Agent.TempDirectory": str(tmp_path)}
    values = {p["name"]: p.get("default", "") for p in template["parameters"]}
    values.update(parameters)

    def expand(text: str) -> str:
        text = re.sub(r"\$\{\{ parameters\.(\w+) \}\}", lambda m: str(values[m.group(1)]), text)
        return re.sub(r"\$\(([\w.]+)\)", lambda m: pipeline_variables.get(m.group(1), ""), text)

    steps = []
    for step in template["steps"]:
        env = {}
        for name, value in (step.get("env") or {}).items():
            if name.startswith("${{ each "):  # the env parameter, key by key
                env.update(values["env"])  # type: ignore[arg-type]
            else:
                env[name] = value
        steps.append({**step, "env": env})
    cwd = Path(expand(template["steps"][-1]["workingDirectory"]))
    return run_steps(steps, expand, python_env, cwd)


def _pre_commit(hook: str, rules_repo: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``pre-commit try-repo`` of this checkout's ``hook`` on every file of the rules repository, as staged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    subprocess.run(["git", "add", "-A"], cwd=rules_repo, check=True)
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(REPO), hook, "--all-files"],
                          cwd=rules_repo, env=env, capture_output=True, text=True, timeout=900)


def test_the_pre_commit_hook_validates_with_pre_commit_itself(rules_repo, tmp_path):
    done = _pre_commit("sbrules-validate", rules_repo, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sbrules validate" in done.stdout and "Passed" in done.stdout

    (rules_repo / "rules" / "orders.yaml").write_text("topic: orders\nsubscriptions: {billing: {rules: [{name: x, sql: 'a = = 1'}]}}\n")
    done = _pre_commit("sbrules-validate", rules_repo, tmp_path)
    assert done.returncode == 1 and "Failed" in done.stdout and "error[sql-syntax]" in done.stdout, done.stdout


def test_the_pre_commit_hook_runs_the_routing_tests_with_pre_commit_itself(rules_repo, tmp_path):
    done = _pre_commit("sbrules-test", rules_repo, tmp_path)
    assert done.returncode == 0 and "sbrules test" in done.stdout and "Passed" in done.stdout, done.stdout + done.stderr

