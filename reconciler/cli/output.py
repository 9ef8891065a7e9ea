"""How a command's outcome reaches the user: result documents, errors and exit codes, in one place.

Every command ends in one of three ways:

* a result: printed by the command (with ``--format json``, exactly one document via :func:`echo_json`);
* an outcome the command reports with a documented exit code (``validate`` finding errors: 1;
  ``drift`` finding drift, ``plan --detailed-exitcode`` finding changes: 2) by raising ``SystemExit``
  (2 means that finding and nothing else: a usage error exits 64);
* an exception, which :func:`run` turns into a :class:`Failure` with :func:`classify`: one
  ``error: …`` line on stderr, and with ``--format json`` also one ``{"error": {"code", "message"}}``
  document on stdout, so a CI step that parses stdout always gets JSON.

An error of sbrules' own names its code on its class (``reconciler.errors``); :data:`FOREIGN` codes
the few exceptions of other libraries that reach here.
Messages pass through :func:`redact` on their way out, so a key, signature or token that slipped
into an exception never reaches the terminal or a log.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import click

from reconciler.atomic_file import write_atomically
from reconciler.errors import ErrorCode, ExitCode, SbrulesError, UsageError
from reconciler.json_text import json_text
from reconciler.redaction import redact

#: Exceptions that are not sbrules' own, with their code: (module, class name, code). An
#: :class:`SbrulesError` carries its own code. Classes are named, not imported, so that classifying
#: never imports a module the command did not load (an exception can only be an instance of a class
#: whose module is loaded); the first matching row wins, so a subclass comes before its base.
FOREIGN: tuple[tuple[str, str, ErrorCode], ...] = (
    ("click.exceptions", "UsageError", ErrorCode.USAGE),
    ("click.exceptions", "ClickException", ErrorCode.INPUT),
    ("click.exceptions", "Abort", ErrorCode.INTERRUPTED),
    ("builtins", "KeyboardInterrupt", ErrorCode.INTERRUPTED),
    ("pyspark.errors", "PySparkException", ErrorCode.SPARK),
    ("py4j.protocol", "Py4JError", ErrorCode.SPARK),
)

#: When an error has several causes (one per subscription) that classify differently, the code
#: of the one a user must fix first: nothing else can work until it is.
_PRECEDENCE = (
    ErrorCode.INPUT,
    ErrorCode.AUTH,
    ErrorCode.CONNECTION,
    ErrorCode.NOT_FOUND,
    ErrorCode.SERVICE,
    ErrorCode.FAILED,
)

#: Codes whose exceptions are shown with their (redacted) traceback on stderr: a bug.
_TRACEBACK_CODES = frozenset({ErrorCode.INTERNAL})


@dataclass(frozen=True)
class Failure:
    """An exception as the user sees it."""

    code: ErrorCode
    message: str
    exit_code: int
    #: Extra members of the error object (``diagnostics``: located findings, e.g. invalid rule files).
    details: dict[str, Any] = field(default_factory=dict)
    show_traceback: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": str(self.code), "message": self.message, **self.details}}


def code_of(exc: BaseException) -> ErrorCode:
    """The error code of ``exc`` (``internal`` for anything sbrules does not expect).

    An error that stands for several failures (``causes``, e.g. one per subscription that could
    not be read) takes its causes' code; when they differ, the one a user must fix first.
    """
    causes = getattr(exc, "causes", None)
    if causes:
        codes = {code_of(cause) for cause in causes}
        return min(codes, key=lambda c: _PRECEDENCE.index(c) if c in _PRECEDENCE else len(_PRECEDENCE))
    if isinstance(exc, SbrulesError):
        return exc.code
    for module_name, class_name, code in FOREIGN:
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type) and isinstance(exc, cls):
            return code
    return ErrorCode.INTERNAL


def classify(exc: BaseException, secrets: Iterable[str] = ()) -> Failure:
    """What the user is told about ``exc``: code, one redacted message, exit code, extra details."""
    if isinstance(exc, click.exceptions.Abort) and isinstance(exc.__context__, KeyboardInterrupt):
        exc = exc.__context__  # click turns Ctrl-C into Abort; EOF at a prompt stays "aborted"
    code = code_of(exc)
    if code is ErrorCode.INTERNAL:
        message = f"internal error (a bug in sbrules; please report it): {type(exc).__name__}: {exc}"
    elif code is ErrorCode.INTERRUPTED:
        message = "aborted" if isinstance(exc, click.exceptions.Abort) else str(exc) or "interrupted"
    elif isinstance(exc, click.ClickException):
        message = exc.format_message()
        context = getattr(exc, "ctx", None)
        if isinstance(exc, click.UsageError) and context is not None:
            message += f" (see '{context.command_path} --help')"
    elif code is ErrorCode.SPARK and not isinstance(exc, SbrulesError):
        # Spark's own exception, not met where reconciler.traffic.spark.failures names the causes it knows.
        from reconciler.traffic.spark.failures import summary

        message = f"Spark failed: {summary(exc)}"
    else:
        message = str(exc) or type(exc).__name__
    details: dict[str, Any] = {}
    diagnostics = getattr(exc, "diagnostics", None)
    if diagnostics and code is not ErrorCode.INTERNAL:
        from reconciler.diagnostics import to_json

        details["diagnostics"] = [to_json(d) for d in diagnostics]
    return Failure(
        code=code,
        message=redact(message, secrets),
        # End of input at a prompt (click's Abort without a Ctrl-C) is interrupted, but no signal: 1.
        exit_code=code.exit_code if isinstance(exc, KeyboardInterrupt) or code is not ErrorCode.INTERRUPTED else ExitCode.ERROR,
        details=_redact_tree(details, secrets),
        show_traceback=code in _TRACEBACK_CODES,
    )


# ------------------------------------------------------------------------------------------------
# Secrets
# ------------------------------------------------------------------------------------------------

def _redact_tree(value: Any, secrets: Iterable[str]) -> Any:
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _redact_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_tree(v, secrets) for v in value]
    return value


def secrets_in_use(argv: Sequence[str]) -> list[str]:
    """The secret values of the connection strings this run may use (option and environment variables)."""
    # Any variable may hold one: sbrules.yaml names an environment's (connection_string_env).
    strings = [value for value in os.environ.values() if "sharedaccess" in value.lower()]
    for index, arg in enumerate(argv):
        if arg == "--connection-string" and index + 1 < len(argv):
            strings.append(argv[index + 1])
        elif arg.startswith("--connection-string="):
            strings.append(arg.partition("=")[2])
    found = []
    for text in strings:
        for part in text.split(";"):
            key, _, value = part.partition("=")
            if key.strip().lower() in ("sharedaccesskey", "sharedaccesssignature") and value.strip():
                found.append(value.strip())
    return found


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``--format json`` (the last ``--format`` wins, as in click).

    Read from the arguments rather than from parsed options, so that an error while the command
    line itself is parsed is reported as JSON too.
    """
    fmt = None
    for index, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--format" and index + 1 < len(argv):
            fmt = argv[index + 1]
        elif arg.startswith("--format="):
            fmt = arg.partition("=")[2]
    return fmt == "json"


def echo_json(doc: Any) -> None:
    """Print a command's one JSON document on stdout (anything shaped like a secret redacted: a key
    pasted into a rule file is quoted by the findings about it)."""
    click.echo(redact(json_text(doc)), nl=False)


def write_output(out: Path, text: str, what: str) -> None:
    """Write ``text`` to the file a user named with ``--out`` (whole or not at all); a path that
    cannot be written is a usage error naming it and the cause, never a traceback."""
    try:
        write_atomically(out, text)
    except OSError as exc:
        raise UsageError(f"cannot write {what} to {out}: {exc.strerror or exc}") from None


def echo_text(text: str) -> None:
    """Print a command's text result on stdout, redacted like :func:`echo_json`."""
    click.echo(redact(text))


#: Set by ``sbrules -v``: every failure is shown with its (redacted) traceback.
VERBOSE = False


def report(failure: Failure, exc: BaseException, *, as_json: bool, secrets: Sequence[str] = ()) -> None:
    """Tell the user: the traceback when it helps (stderr), one ``error:`` line (stderr) and, in
    JSON mode, the error document (stdout)."""
    if failure.show_traceback or VERBOSE:
        text = "".join(traceback.format_exception(exc))
        click.echo(redact(text, secrets), err=True, nl=False)
    if failure.code is ErrorCode.INTERRUPTED or "diagnostics" in failure.details:
        # Located diagnostics already start with their place and severity ("f.yaml:6:19: error[...]").
        click.echo(failure.message, err=True)
    else:
        click.echo(f"error: {failure.message}", err=True)
    if as_json:
        echo_json(failure.to_json())


def run(command: click.Command, argv: Sequence[str] | None, prog_name: str) -> None:
    """Run ``command`` and exit: its own exit code, or the classified failure's."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except SystemExit:
        raise
    except BaseException as exc:  # every failure leaves through classify()
        secrets = secrets_in_use(args)
        failure = classify(exc, secrets)
        report(failure, exc, as_json=wants_json(args), secrets=secrets)
        sys.exit(failure.exit_code)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)
