"""Options and helpers shared by several commands (the namespace to talk to, output format)."""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable

import click

from reconciler.app.target import CONNECTION_ENV, Target, TargetOptions
from reconciler.gc_pause import paused_gc
from reconciler.namespace.credits import DEFAULT_CREDIT_SHARE, STANDARD_CREDITS_PER_SECOND

if TYPE_CHECKING:
    from reconciler.model import Message
    from reconciler.namespace.pacing import Pacer, PacingStats
    from reconciler.rulefiles.project import Environment

AUTH_ENV = "SBRULES_AUTH"
AUTH_KINDS = ("sas", "entra")
ENV_ENV = "SBRULES_ENV"
TRANSPORT_ENV = "SBRULES_TRANSPORT"


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
    click.option(
        "--max-credits",
        type=click.FloatRange(min=1),
        help="Spend at most N of the namespace's credits per second (Standard tier: 1000/s shared by every "
        "client; 10 per rule operation, 1 per peeked message). Overrides --credit-share.",
    ),
    click.option(
        "--credit-share",
        type=click.FloatRange(min=0, max=1, min_open=True),
        default=DEFAULT_CREDIT_SHARE,
        show_default=True,
        help=f"Spend at most this share of a Standard namespace's {STANDARD_CREDITS_PER_SECOND} credits/s, leaving "
        "the rest to its own senders and receivers. Throttling halves sbrules' rate; it grows back while none comes.",
    ),
    click.option(
        "--management-endpoint",
        metavar="URL",
        envvar="SBRULES_MANAGEMENT_ENDPOINT",
        show_envvar=True,
        callback=lambda _ctx, _param, value: _management_url(value),
        help="Where the management REST API (discovery) is served, when not https://<namespace host>: e.g. "
        "Microsoft's emulator's http://localhost:5300.",
    ),
    click.option(
        "--transport",
        type=click.Choice(("amqp", "websockets")),
        envvar=TRANSPORT_ENV,
        show_envvar=True,
        help="amqp: port 5671; websockets: AMQP over WebSockets on port 443 (wss://<host>/$servicebus/websocket), "
        "for networks that allow only HTTPS. Default: the connection string's TransportType, else amqp.",
    ),
    click.option(
        "--proxy",
        metavar="URL",
        help="HTTP proxy for WebSockets and the management REST API, http://[user:password@]host:port, reached with "
        "CONNECT (default: $HTTPS_PROXY or $https_proxy, except for hosts in $NO_PROXY). Plain AMQP cannot use one.",
    ),
    click.option(
        "--ca-file",
        "ca_file",
        metavar="PATH",
        help="PEM file of the CAs to trust instead of the system's, for AMQP, WebSockets and REST (default: "
        "$SSL_CERT_FILE, else $REQUESTS_CA_BUNDLE), e.g. a company proxy's CA bundle.",
    ),
)


def _management_url(value: str | None) -> str | None:
    from reconciler.app.target import check_management_url

    try:
        return check_management_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def open_target(options: "TargetOptions", environment: "Environment | None" = None) -> "Target":
    """The command's target (``options``, or ``environment``'s namespace), made once: its notes go to
    stderr, and the command's end waits for its tier probe."""
    target = options.target(environment, note=lambda line: click.echo(f"note: {line}", err=True))
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(target.close)
    return target


#: plan, drift and apply: --no-discovery sets ``namespace.discovery`` (give it after @namespace_options).
no_discovery_option = click.option(
    "--no-discovery", "no_discovery", is_flag=True,
    help="Do not list topics and subscriptions over the management REST API: read the declared "
    "subscriptions only, as with a Listen-only key (undeclared ones are not reported).",
)


def namespace_options(func: Callable) -> Callable:
    """``--connection-string``, ``--auth``, ``--timeout``, ``--max-credits``, ``--credit-share``,
    ``--management-endpoint``, ``--transport``, ``--proxy`` and ``--ca-file``, handed to the command
    as ``namespace``.

    The one definition every networked command uses; the connection string is never echoed back.
    """

    @functools.wraps(func)
    def command(
        *args: object, connection_string: str | None, auth: str, timeout: float, max_credits: float | None,
        credit_share: float, management_endpoint: str | None, transport: str | None, proxy: str | None,
        ca_file: str | None, **kwargs: object,
    ) -> object:
        context = click.get_current_context()
        explicit = any(
            context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
            for name in ("connection_string", "auth")
        )
        namespace = TargetOptions(
            connection_string, auth, timeout, explicit, max_credits, credit_share, management_endpoint=management_endpoint,
            transport=transport, proxy=proxy, ca_file=ca_file,
        )
        return func(*args, namespace=namespace, **kwargs)

    for option in reversed(_NAMESPACE_OPTIONS):
        command = option(command)
    return command


def pacing_text(stats: "PacingStats") -> str:
    """The rate the namespace lets through now, for a progress bar: credits/s, and throttling when any."""
    text = f"{stats.recent_credits_per_second:,.0f} credits/s"
    if stats.budget is not None:
        text += f" of {stats.budget:,.0f}"
    if stats.throttled:
        text += f", throttled {stats.throttled}x, held {stats.held_seconds:.1f}s"
    return text


@contextlib.contextmanager
def progress_bars(totals: Mapping[str, int | None], pacer: "Pacer") -> Iterator[Callable[[str, int], None]]:
    """Progress bars on a terminal (stderr), one per ``totals`` key (its total, None when unknown),
    each with the rate the namespace lets through; yields ``advance(key, count)``. On any other
    stderr there is no output and rich is not imported: a pipeline's run does not pay for it."""
    if not sys.stderr.isatty():
        yield lambda key, count: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[pacing]}", style="dim"),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        tasks = {key: progress.add_task(key, total=total, pacing="") for key, total in totals.items()}
        yield lambda key, count: progress.update(tasks[key], advance=count, pacing=pacing_text(pacer.stats()))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector paused while the command builds what it keeps until it ends (rules,
    findings, live rules: see reconciler.gc_pause), and what was built frozen out of its sight;
    unfrozen when the command ends, so that an in-process caller (the tests) collects it again."""
    click.get_current_context().call_on_close(gc.unfreeze)
    with paused_gc(freeze=True):
        yield


def format_option(*choices: str, default: str | None = None) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default or choices[0],
        show_default=True,
        help="Output format.",
    )


env_option = click.option(
    "--env",
    "env",
    envvar=ENV_ENV,
    show_envvar=True,
    metavar="NAME",
    help="An environment of sbrules.yaml: its variables, overlays, topic names and namespace.",
)


#: The --message option's help (route, send): the JSON a message is described in.
MESSAGE_HELP = 'Sample message JSON: {"sys": {"Label": ...}, "user": {"name": value}} ("-" reads stdin).'


def read_message(handle: Any) -> "Message":
    """The message described by the JSON in ``handle`` (an open file); InputError naming the file."""
    import json

    from reconciler.errors import InputError
    from reconciler.model import Message, TypedValueError

    name = getattr(handle, "name", "message")
    try:
        doc = json.load(handle)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not JSON: {exc}") from None
    try:
        return Message.from_json(doc)
    except TypedValueError as exc:
        raise InputError(f"{name}: {exc}") from None
