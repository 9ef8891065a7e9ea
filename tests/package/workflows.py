"""Just enough of a GitHub Actions runner to run a documented job as written, with sbrules' own
action for real: its shell steps in order, each step's `if:`, outputs between steps, the job's
outcome. Steps of other actions (checkout, setup-python, comments, artefacts) are not run; the
runner records which ran and checks that the file a comment or an artefact step names exists."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class Job:
    """What a run of one job left: its outcome, each step's outputs, the steps that ran."""

    success: bool
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    summary: str = ""
    log: str = ""


def run_steps(steps: list[dict], expand: Callable[[str], str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Each shell step of an action or template in turn, with its env, as the runner runs it;
    stops at the first that fails (platform steps such as setup-python are left out)."""
    done = None
    for step in steps:
        if "run" not in step and "script" not in step:
            continue
        step_env = dict(env)
        step_env.update({expand(str(name)): expand(str(value)) for name, value in (step.get("env") or {}).items()})
        done = subprocess.run(["bash", "-e", "-c", expand(step.get("run") or step["script"])], cwd=cwd, env=step_env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return done
    assert done is not None
    return done


def run_action(inputs: dict[str, str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """sbrules' action.yml with these inputs (unknown inputs are an error, as on GitHub): the
    step's process and the outputs it set (plus ``summary``: what it wrote to the job summary)."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    unknown = set(inputs) - set(values)
    assert not unknown, f"the action has no inputs {unknown}"
    values.update(inputs)

    def expand(text: str) -> str:
        text = text.replace("${{ github.action_path }}", str(REPO))
        return re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: values[m.group(1)], text)

    files = {name: cwd.parent / f"{name}.txt" for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
    files["GITHUB_OUTPUT"].write_text("")
    files["GITHUB_STEP_SUMMARY"].touch()
    summary_before = files["GITHUB_STEP_SUMMARY"].read_text()
    done = run_steps(action["runs"]["steps"], expand,
                     {**env, **{k: str(v) for k, v in files.items()}, "RUNNER_TEMP": str(cwd.parent)}, cwd)
    outputs = dict(line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)
    outputs["summary"] = files["GITHUB_STEP_SUMMARY"].read_text()[len(summary_before):]
    return done, outputs


def workflow(page: Path, first_line: str) -> dict[str, Any]:
    """The ```yaml block of a docs page whose first line is ``first_line``."""
    for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S):
        if block.startswith(first_line):
            return yaml.safe_load(block)
    raise AssertionError(f"{page.name} has no yaml block starting {first_line!r}")


def run_job(flow: dict[str, Any], name: str, *, secrets: dict[str, str], env: dict[str, str], cwd: Path,
            matrix: dict[str, str] | None = None) -> Job:
    """Run one job of a workflow in ``cwd`` (a checkout of the rules repository)."""
    job_spec = flow["jobs"][name]
    job = Job(success=True)
    context = {"secrets": secrets, "matrix": matrix or {}, "vars": {}}

    def value(expression: str) -> str:
        scope, _, rest = expression.partition(".")
        if scope == "steps":
            step_id, _, output = rest.partition(".outputs.")
            return job.outputs.get(step_id, {}).get(output, "")
        return str(context.get(scope, {}).get(rest, ""))

    def expand(text: Any) -> str:
        return _EXPRESSION.sub(lambda m: value(m.group(1)), str(text))

    def condition(text: str | None) -> bool:
        text = _EXPRESSION.sub(lambda m: m.group(1), (text or "success()").strip())
        if text == "always()":
            return True
        if text == "failure()":
            return not job.success
        if text == "success()":
            return job.success
        compared = re.fullmatch(r"([\w.-]+) == '([^']*)'", text)
        assert compared, f"the runner does not read the condition {text!r}"
        return job.success and value(compared.group(1)) == compared.group(2)

    job_env = {**env, **{k: expand(v) for k, v in (flow.get("env") or {}).items()},
               **{k: expand(v) for k, v in (job_spec.get("env") or {}).items()}}
    for index, step in enumerate(job_spec["steps"]):
        if not condition(step.get("if")):
            continue
        uses, with_ = step.get("uses", ""), {k: expand(v) for k, v in (step.get("with") or {}).items()}
        label = step.get("id") or uses or f"run {index}"
        job.ran.append(label)
        if re.search(r"/sbrules@", uses):
            done, outputs = run_action(with_, job_env, cwd)
            job.summary += outputs.pop("summary")
            job.outputs[step.get("id", label)] = outputs
        elif "run" in step:
            done = subprocess.run(["bash", "-e", "-c", expand(step["run"])], cwd=cwd, env=job_env,
                                  capture_output=True, text=True, timeout=600)
        else:
            if "path" in with_:  # a comment or an artefact: the file it takes must be there
                assert (cwd / with_["path"]).is_file(), f"{uses} has no file {with_['path']}"
            continue
        job.log += done.stdout + done.stderr
        if done.returncode != 0:
            job.success = False
    return job
