"""Options and helpers shared by several commands (the namespace to talk to, output format)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from reconciler.amqp.client import ManagementClient
    from reconciler.rest import ManagementRestClient

CONNECTION_ENV = "SERVICEBUS_CONNECTION_STRING"
AUTH_ENV = "SBRULES_AUTH"
AUTH_KINDS = ("sas", "entra")


def require_connection_string(value: str | None) -> str:
    """The connection string, or a usage error that names both ways to give it."""
    if value:
        return value
    if os.environ.get(CONNECTION_ENV):
        return os.environ[CONNECTION_ENV]
    raise click.UsageError(f"no connection string: pass --connection-string or set ${CONNECTION_ENV}")


@dataclass(frozen=True)
class Namespace:
    """Where a networked command connects and how it authenticates (``--connection-string``,
    ``--auth``, ``--timeout``); makes the AMQP and REST clients, which share all three."""

    connection_string: str | None
    auth: str = "sas"
    timeout: float = 30.0

    def amqp(self, **options: object) -> "ManagementClient":
        from reconciler.amqp.client import ManagementClient

        return ManagementClient(
            require_connection_string(self.connection_string), auth=self.auth, timeout=self.timeout, **options
        )

    def rest(self) -> "ManagementRestClient":
        from reconciler.rest import ManagementRestClient

        return ManagementRestClient(require_connection_string(self.connection_string), auth=self.auth, timeout=self.timeout)


_NAMESPACE_OPTIONS = (
    click.option(
        "--connection-string",
        "connection_string",
        envvar=CONNECTION_ENV,
        show_envvar=True,
        show_default=False,
        help=f"Service Bus connection string (default: ${CONNECTION_ENV}). With --auth entra only its "
        "Endpoint is used: Endpoint=sb://<namespace>.servicebus.windows.net/.",
    ),
    click.option(
        "--auth",
        type=click.Choice(AUTH_KINDS),
        default="sas",
        envvar=AUTH_ENV,
        show_envvar=True,
        show_default=True,
        help="sas: the key or signature in the connection string; entra: Entra ID via azure-identity "
        "(pip install 'sbrules[entra]').",
    ),
    click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=30.0,
        show_default=True,
        help="Seconds to wait for each request; a connection that does not open within half of it fails.",
    ),
)


def namespace_options(func: Callable) -> Callable:
    """``--connection-string``, ``--auth`` and ``--timeout``, handed to the command as ``namespace``.

    The one definition every networked command uses; the connection string is never echoed back.
    """

    @functools.wraps(func)
    def command(*args: object, connection_string: str | None, auth: str, timeout: float, **kwargs: object) -> object:
        return func(*args, namespace=Namespace(connection_string, auth, timeout), **kwargs)

    for option in reversed(_NAMESPACE_OPTIONS):
        command = option(command)
    return command


def format_option(*choices: str, default: str | None = None) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default or choices[0],
        show_default=True,
        help="Output format.",
    )
