"""What the executors need: the zip sbrules ships is all the executor code imports besides
PySpark, numpy and pyarrow, and an executor lacking a module fails the report in one line."""

from __future__ import annotations

import subprocess

import pytest

from reconciler.model import DesiredState, Message, Rule, SqlFilter, Subscription, Topic, TypedValue
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset

#: What executor code does: the Python fallback evaluates a rule; the fold counts with numpy.
EXECUTOR_CODE = """
import sys
sys.path.insert(0, sys.argv[1])
from reconciler.model import Message, Rule, SqlFilter, TypedValue
from reconciler.sql import matches
import reconciler.traffic.spark.tally
message = Message(sys={}, user={"s": TypedValue("string", "v1")})
print(matches(Rule("r", SqlFilter("'v1' LIKE s")), message).label)
print(reconciler.__file__)
"""


@pytest.mark.slow
def test_the_shipped_zip_is_enough_for_the_executor_code(python_without, tmp_path):
    from reconciler.traffic.spark.executors import _archive

    python = python_without("lark")
    done = subprocess.run([python, "-c", EXECUTOR_CODE, str(_archive())], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    label, origin = done.stdout.split()
    assert label == "true" and origin.startswith(str(_archive()))


def test_a_module_the_executors_lack_stops_the_report_in_one_line(spark, python_without, tmp_path):
    """The local session's Python workers run an interpreter without sbrules for one report."""
    from reconciler.plan import read_plan_file
    from reconciler.traffic.analysis.impact import impact_report
    from reconciler.traffic.spark.executors import ExecutorError

    store = Dataset(tmp_path / "sample")
    store.add(message_to_row(Message(sys={}, user={"s": TypedValue("string", "v1")}), topic="orders", subscription="all"))
    store.flush()
    plan = tmp_path / "plan.json"
    plan.write_text('{"format_version": 2, "changes": [], "subscriptions": [], "skipped": [], "warnings": []}')
    dynamic = Rule("dyn", SqlFilter("'v1' LIKE s"))  # a pattern computed per message: the Python fallback
    desired = DesiredState((Topic("orders", (Subscription("s", (dynamic,)),)),))
    context = spark.sparkContext
    saved, context.pythonExec = context.pythonExec, python_without()
    try:
        with pytest.raises(ExecutorError) as raised:
            impact_report(desired, read_plan_file(plan), str(tmp_path / "sample"), against=str(plan))
    finally:
        context.pythonExec = saved
    message = str(raised.value)
    assert "\n" not in message
    assert "cannot import reconciler" in message and "pip install sbrules" in message
