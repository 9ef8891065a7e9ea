"""The errors a user can cause, and what each tells a script: its error code and exit status.

Every such error is an :class:`SbrulesError` whose class names its ``code`` (the ``code`` of the
``{"error": …}`` document, schemas/error.schema.json) and so its exit status. The CLI prints these
without a traceback (reconciler/cli/output.py); docs/output.md lists the codes and exit statuses.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ExitCode(enum.IntEnum):
    """The process exit statuses, the same for every command (docs/output.md: "Exit codes")."""

    OK = 0
    #: The command failed (any error code but ``usage``), or ``validate``/``sql check`` found the
    #: input invalid, or ``apply`` could not apply everything.
    ERROR = 1
    #: ``drift`` found drift, ``plan --detailed-exitcode`` found changes: a finding, not an error.
    CHANGES = 2
    #: The command line is wrong (``usage``): sysexits.h's EX_USAGE, so no gate mistakes it for a finding.
    USAGE = 64
    #: Interrupted with Ctrl-C (128 + SIGINT).
    INTERRUPTED = 130


class ErrorCode(enum.StrEnum):
    """The ``code`` of an error document (docs/output.md: "Errors")."""

    USAGE = "usage"
    RULES_INVALID = "rules-invalid"
    INPUT = "input"
    CONNECTION = "connection"
    AUTH = "auth"
    NOT_FOUND = "not-found"
    SERVICE = "service"
    SPARK = "spark"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    INTERNAL = "internal"

    @property
    def exit_code(self) -> ExitCode:
        """The exit status of a failure with this code."""
        if self is ErrorCode.USAGE:
            return ExitCode.USAGE
        if self is ErrorCode.INTERRUPTED:
            return ExitCode.INTERRUPTED
        return ExitCode.ERROR


class SbrulesError(Exception):
    """An error with a message a person can act on; a subclass names its ``code`` when it is not
    ``failed``."""

    code: ClassVar[ErrorCode] = ErrorCode.FAILED


class UsageError(SbrulesError):
    """The command line names nothing to work on (no PATH, and no ./rules or sbrules.yaml here)."""

    code = ErrorCode.USAGE


class InputError(SbrulesError):
    """A file or value given to a command (other than rule files) cannot be used."""

    code = ErrorCode.INPUT

