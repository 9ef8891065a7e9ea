"""Options and helpers shared by several commands (connection string, output format)."""

from __future__ import annotations

import os
from typing import Callable

import click

CONNECTION_ENV = "SERVICEBUS_CONNECTION_STRING"


def connection_option(func: Callable) -> Callable:
    """``--connection-string`` / $SERVICEBUS_CONNECTION_STRING; the value is never echoed back."""
    return click.option(
        "--connection-string",
        "connection_string",
        envvar=CONNECTION_ENV,
        show_envvar=True,
        show_default=False,
        help=f"Service Bus connection string (default: ${CONNECTION_ENV}).",
    )(func)


def require_connection_string(value: str | None) -> str:
    """The connection string, or a usage error that names both ways to give it."""
    if value:
        return value
    if os.environ.get(CONNECTION_ENV):
        return os.environ[CONNECTION_ENV]
    raise click.UsageError(f"no connection string: pass --connection-string or set ${CONNECTION_ENV}")


def format_option(*choices: str, default: str | None = None) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default or choices[0],
        show_default=True,
        help="Output format.",
    )
