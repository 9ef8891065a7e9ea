"""Notes (info findings) at scale: one line per code unless --verbose; JSON always lists every one."""

from __future__ import annotations

import gc
import json

import pytest
import yaml

from reconciler.diagnostics import Diagnostic, fold_notes
from reconciler.gc_pause import paused_gc
from reconciler.model import Origin


def note(code: str, line: int, message: str = "m") -> Diagnostic:
    return Diagnostic("info", code, f"{message} {line}", Origin("f.yaml", line, 1))


@pytest.mark.unit
def test_notes_of_one_code_fold_into_the_first_with_a_count():
    error = Diagnostic("error", "sql-syntax", "bad", Origin("f.yaml", 2, 1))
    warning = Diagnostic("warning", "ambiguous-yaml", "w", Origin("f.yaml", 3, 1))
    diags = [note("default-removed", 1), error, warning, note("default-removed", 4), note("unmanaged", 5),
             note("default-removed", 6), Diagnostic("warning", "ambiguous-yaml", "w2", Origin("f.yaml", 7, 1))]
    folded = fold_notes(diags)
    assert [(d.code, d.origin.line) for d in folded] == [
        ("default-removed", 1), ("sql-syntax", 2), ("ambiguous-yaml", 3), ("unmanaged", 5), ("ambiguous-yaml", 7),
    ]
    assert folded[0].message == "3 notes like this first one (--verbose lists them): m 1"
    assert folded[3] == diags[4]  # a code with one note is shown as it is
    assert fold_notes([]) == []


@pytest.mark.unit
def test_paused_gc_nests_and_restores_the_collector():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError
    assert gc.isenabled()


def _many_notes(write) -> None:
    subs = "".join(
        f"  s{i}:\n    rules:\n      - {{name: r, correlation: {{properties: {{tier: {{int: {i}}}}}}}}}\n" for i in range(30)
    )
    write("rules/many.yaml", "topic: orders\nsubscriptions:\n" + subs)


@pytest.mark.unit
def test_validate_prints_one_line_per_note_code_and_verbose_lists_them(run_cli, write, monkeypatch, tmp_path):
    _many_notes(write)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("validate", "rules")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3, out  # default-removed, typed-correlation, the verdict
    assert "info[default-removed]: 30 notes like this first one (--verbose lists them): orders/s0 " in lines[0]
    assert lines[1].startswith("rules/many.yaml:5:52: info[typed-correlation]: 30 notes like this first one")
    assert lines[2] == "valid: 1 files, 30 subscriptions, 30 rules; 0 errors, 0 warnings, 60 notes"
    for verbose in (["validate", "--verbose", "rules"], ["-v", "validate", "rules"]):
        code, out, _ = run_cli(*verbose)
        assert code == 0 and len(out.splitlines()) == 61 and "notes like this" not in out
    code, out, _ = run_cli("validate", "rules", "--format", "github")
    assert len(out.splitlines()) == 2 and out.startswith("::notice file=rules/many.yaml,line=3,col=3::")
    code, out, _ = run_cli("validate", "rules", "--format", "json")  # folded as text is, counted in full
    doc = json.loads(out)
    assert len(doc["diagnostics"]) == 2 and doc["summary"]["info"] == 60
    code, out, _ = run_cli("validate", "rules", "--format", "json", "--verbose")
    assert len(json.loads(out)["diagnostics"]) == 60


@pytest.mark.unit
def test_many_warnings_of_one_code_show_five_and_count_the_rest(tmp_path, run_cli):
    rules = [{"name": "$Default", "filter": True}] + [{"name": f"r{i}", "sql": f"n = {i}"} for i in range(9)]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"topic": "t", "subscriptions": {"s": {"rules": rules}}}))
    code, out, _ = run_cli("validate", tmp_path)
    warnings = [line for line in out.splitlines() if "warning[redundant-rule]" in line]
    assert code == 0 and len(warnings) == 6 and "4 more warnings of this code" in warnings[-1], out
    code, out, _ = run_cli("validate", tmp_path, "--verbose")
    assert out.count("warning[redundant-rule]") == 9


@pytest.mark.unit
def test_the_static_proofs_stop_at_their_budget_and_say_how_far_they_got(tmp_path, run_cli):
    subs = {f"s{i}": {"rules": [{"name": "$Default", "filter": True}, {"name": "r", "sql": "n = 1"}]} for i in range(3)}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"topic": "t", "subscriptions": subs}))
    code, out, _ = run_cli("validate", tmp_path, "--static-budget", "0")
    assert code == 0 and "redundant-rule" not in out and "static-budget" not in out  # 0: not run at all
    code, out, _ = run_cli("validate", tmp_path, "--static-budget", "0.000001")
    assert "info[static-budget]" in out and "subscriptions checked" in out, out
    code, out, _ = run_cli("validate", tmp_path)
    assert out.count("warning[redundant-rule]") == 3 and "static-budget" not in out
