"""The error framework: every failure is one `error:` line on stderr, and with --format json one
error document on stdout (schemas/error.schema.json), with the documented exit code and no secret."""

from __future__ import annotations

import importlib
import json
import socket

import click
import pytest

from reconciler.cli import output
from reconciler.cli.output import ErrorCode, classify, redact, wants_json
from reconciler.errors import SbrulesError

from .conftest import RULES


def error_doc(output_schema, code: int, out: str, err: str, expected: str) -> dict:
    """The one error document on stdout, checked against its schema and against stderr's line."""
    doc = json.loads(out)
    output_schema("error").validate(doc)
    assert doc["error"]["code"] == expected, doc
    if expected == "rules-invalid":  # located diagnostics, each line led by its place: "f.yaml:5:22: error[...]"
        assert ": error[" in err and not err.startswith("error: ")
    else:
        assert any(line.startswith("error: ") for line in err.splitlines()) or expected == "interrupted"
    assert "Traceback" not in err or expected == "internal"
    assert code == (64 if expected == "usage" else 130 if expected == "interrupted" else 1)
    return doc["error"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_foreign_row_names_a_real_class():
    for module_name, class_name, code in output.FOREIGN:
        cls = getattr(importlib.import_module(module_name), class_name, None)
        assert isinstance(cls, type) and issubclass(cls, BaseException), f"{module_name}.{class_name} ({code})"


@pytest.mark.unit
def test_a_subclass_is_never_shadowed_by_an_earlier_base():
    """First match wins: a row whose class is a subclass of an earlier row's class would never apply."""
    classes = [getattr(importlib.import_module(m), c) for m, c, _ in output.FOREIGN]
    for later, cls in enumerate(classes):
        for earlier in classes[:later]:
            assert not issubclass(cls, earlier), f"{cls.__name__} comes after its base {earlier.__name__}"


def _all_error_classes() -> list[type[SbrulesError]]:
    """Every SbrulesError subclass defined anywhere in the package (each module imported)."""
    import pkgutil

    import reconciler

    for module in pkgutil.walk_packages(reconciler.__path__, "reconciler."):
        if not module.name.endswith("__main__"):  # runs the CLI
            importlib.import_module(module.name)
    found, todo = [], [SbrulesError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_every_error_class_carries_a_code_a_user_can_be_told():
    """The code lives on the class; the CLI's own codes (interrupted, internal) are not an error
    class's to claim, and usage only ``UsageError``'s: the library's one way to say that the
    command line names nothing to work on (a wrong --env, no rules), below the CLI that owns click."""
    from reconciler.errors import UsageError

    classes = _all_error_classes()
    assert len(classes) > 20
    for cls in classes:
        assert isinstance(cls.code, ErrorCode), cls
        assert cls.code not in (ErrorCode.INTERRUPTED, ErrorCode.INTERNAL), cls
        assert cls.code is not ErrorCode.USAGE or cls is UsageError, cls
        assert classify(cls.__new__(cls)).code is cls.code


@pytest.mark.unit
def test_an_error_with_several_causes_takes_the_code_a_user_must_fix_first():
    from reconciler.namespace.errors import NotFoundError, ServerBusyError, UnauthorizedError
    from reconciler.observe import ObserveError

    causes = [NotFoundError("gone"), UnauthorizedError("refused"), ServerBusyError("busy")]
    assert classify(ObserveError(["a", "b", "c"], causes)).code is ErrorCode.AUTH
    assert classify(ObserveError(["a"], [NotFoundError("gone")])).code is ErrorCode.NOT_FOUND


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv, expected",
    [
        (["plan", "--format", "json"], True),
        (["plan", "--format=json"], True),
        (["plan", "--format", "json", "--format", "text"], False),
        (["plan", "--format", "markdown"], False),
        (["route", "--", "--format", "json"], False),
        (["rules", "list"], False),
    ],
)
def test_json_mode_is_read_from_the_command_line(argv, expected):
    assert wants_json(argv) is expected


@pytest.mark.unit
def test_redaction_hides_keys_signatures_and_tokens():
    text = (
        "Endpoint=sb://x/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0LWtleQ== failed; "
        "token SharedAccessSignature sr=sb%3a%2f%2fx&sig=abc%2Bdef%3D&se=1&skn=root; "
        "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl"
    )
    clean = redact(text, ["my-literal-secret"])
    for secret in ("c2VjcmV0LWtleQ==", "abc%2Bdef%3D", "eyJhbGciOiJSUzI1NiJ9", "c2lnbmF0dXJl"):
        assert secret not in clean
    assert "SharedAccessKeyName=root" in clean and "skn=root" in clean
    assert redact("value my-literal-secret here", ["my-literal-secret"]) == "value <redacted> here"


@pytest.mark.unit
def test_usage_errors_exit_64_as_json(run_cli, output_schema):
    error = error_doc(output_schema, *run_cli("validate", RULES, "--format", "json", "--frmat", "x"), "usage")
    assert "--frmat" in error["message"]
    code, out, err = run_cli("validate", RULES, "--frmat", "x")
    assert code == 64 and out == "" and err.startswith("error: No such option")


@pytest.mark.unit
def test_invalid_rule_files_are_rules_invalid_with_their_diagnostics(run_cli, output_schema, tmp_path):
    broken = tmp_path / "orders.yaml"
    broken.write_text("topic: orders\nsubscriptions:\n  s:\n    rules:\n      - {name: a, sql: 'a = = 1'}\n")
    error = error_doc(output_schema, *run_cli("drift", broken, "--format", "json"), "rules-invalid")
    (diagnostic,) = error["diagnostics"]
    assert (diagnostic["code"], diagnostic["line"]) == ("sql-syntax", 5)


@pytest.mark.unit
def test_bad_input_files_are_input_errors(run_cli, output_schema, tmp_path):
    message = tmp_path / "msg.json"
    message.write_text("{not json")
    error = error_doc(output_schema, *run_cli("route", RULES, "--message", message, "--format", "json"), "input")
    assert "not JSON" in error["message"]
    code, out, err = run_cli("route", RULES, "--message", message)
    assert code == 1 and out == "" and err.startswith("error: ") and "not JSON" in err


def test_connection_refused_is_a_connection_error_without_the_key(run_cli, output_schema):
    key = "k3y-" + "x" * 40
    conn = f"Endpoint=sb://127.0.0.1:{free_port()};SharedAccessKeyName=root;SharedAccessKey={key};UseDevelopmentEmulator=true"
    code, out, err = run_cli(
        "rules", "list", "--topic", "orders", "--subscription", "billing", "--format", "json",
        "--timeout", "1", "--connection-string", conn,
    )
    error_doc(output_schema, code, out, err, "connection")
    assert key not in out + err


def test_a_wrong_key_is_an_auth_error_and_a_missing_subscription_not_found(drifted, run_cli, output_schema):
    wrong = drifted.connection_string.replace(drifted.key, "wrong-key-0123456789")
    args = ("rules", "list", "--topic", "orders", "--subscription", "billing", "--format", "json")
    code, out, err = run_cli(*args, "--connection-string", wrong)
    error_doc(output_schema, code, out, err, "auth")
    assert "wrong-key-0123456789" not in out + err

    args = ("rules", "list", "--topic", "orders", "--subscription", "nope", "--format", "json")
    code, out, err = run_cli(*args, "--connection-string", drifted.connection_string)
    error = error_doc(output_schema, code, out, err, "not-found")
    assert "nope" in error["message"] and drifted.key not in out + err

    for command in (("export", "--topic", "nope"), ("subscriptions", "--topic", "nope")):
        code, out, err = run_cli(*command, "--format", "json", "--connection-string", drifted.connection_string)
        error = error_doc(output_schema, code, out, err, "not-found")
        assert "'nope' does not exist" in error["message"]


@pytest.mark.unit
def test_a_bug_is_internal_with_a_redacted_traceback(run_cli, output_schema, monkeypatch, tmp_path):
    key = "s3cr3t-" + "y" * 30
    message = tmp_path / "msg.json"
    message.write_text('{"sys": {}, "user": {}}')
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", f"Endpoint=sb://h/;SharedAccessKeyName=n;SharedAccessKey={key}")

    def broken(*args, **kwargs):
        raise RuntimeError(f"unexpected state while holding {key}")

    monkeypatch.setattr("reconciler.cli.sql.route_state", broken)
    code, out, err = run_cli("route", RULES, "--message", message, "--format", "json")
    error = error_doc(output_schema, code, out, err, "internal")
    assert "RuntimeError" in error["message"] and "Traceback" in err
    assert key not in out + err


@pytest.mark.unit
def test_ctrl_c_exits_130(run_cli, output_schema, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("reconciler.cli.sql.canonical_filter", interrupted)
    error_doc(output_schema, *run_cli("sql", "check", "a = 1", "--format", "json"), "interrupted")
    code, out, err = run_cli("sql", "check", "a = 1")
    assert (code, out, err.strip()) == (130, "", "interrupted")


@pytest.mark.unit
def test_abort_at_a_prompt_is_not_a_traceback(run_cli, monkeypatch):
    def aborted(*args, **kwargs):
        raise click.exceptions.Abort

    monkeypatch.setattr("reconciler.cli.sql.canonical_filter", aborted)
    code, out, err = run_cli("sql", "check", "a = 1")
    assert (code, out, err.strip()) == (1, "", "aborted")
