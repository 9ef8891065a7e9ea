"""Options and helpers shared by several commands (the namespace to talk to, output format)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from reconciler.gc_pause import paused_gc
from reconciler.namespace.credits import DEFAULT_CREDIT_SHARE, STANDARD_CREDITS_PER_SECOND

if TYPE_CHECKING:
    from reconciler.model import DesiredState, Message
    from reconciler.namespace.clients import Clients
    from reconciler.namespace.network import Network
    from reconciler.namespace.pacing import Pacer, PacingStats
    from reconciler.owners import Owners
    from reconciler.rulefiles.project import Environment

CONNECTION_ENV = "SERVICEBUS_CONNECTION_STRING"
AUTH_ENV = "SBRULES_AUTH"
AUTH_KINDS = ("sas", "entra")
ENV_ENV = "SBRULES_ENV"
TRANSPORT_ENV = "SBRULES_TRANSPORT"


def require_connection_string(value: str | None) -> str:
    """The connection string, or a usage error that names both ways to give it."""
    if value:
        return value
    if os.environ.get(CONNECTION_ENV):
        return os.environ[CONNECTION_ENV]
    raise click.UsageError(f"no connection string: pass --connection-string or set ${CONNECTION_ENV}")


@dataclass
class Namespace:
    """Where a networked command connects, how it authenticates, how it gets there and how many of
    the namespace's credits it may spend (``--connection-string``, ``--auth``, ``--timeout``,
    ``--max-credits``, ``--credit-share``, ``--transport``, ``--proxy``, ``--ca-file``); makes the
    AMQP and REST clients through ``clients`` (``reconciler.namespace.clients``)."""

    connection_string: str | None
    auth: str = "sas"
    timeout: float = 30.0
    #: Whether --connection-string or --auth was given on the command line (not from the environment).
    explicit: bool = False
    max_credits: float | None = None
    credit_share: float | None = None
    #: The management REST API's URL (--management-endpoint), when not https://<namespace host>.
    management_endpoint: str | None = None
    #: Whether plan, drift and apply list what exists (--no-discovery: the declared names only).
    discovery: bool = True
    #: --transport, --proxy and --ca-file as given (the environment's defaults are read by ``network``).
    transport: str | None = None
    proxy: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    _clients: "Clients | None" = field(default=None, init=False, repr=False, compare=False)
    _network: "Network | None" = field(default=None, init=False, repr=False, compare=False)

    def for_environment(self, env: "Environment | None") -> "Namespace":
        """The namespace an sbrules.yaml environment names (its connection string's variable, or
        its endpoint for Entra ID), or this one when it names none."""
        if env is None:
            return self
        management_endpoint = self.management_endpoint or _environment_management_url(env)
        if not env.names_namespace:
            return dataclasses.replace(self, management_endpoint=management_endpoint)
        if self.explicit:
            raise click.UsageError(
                f"--env {env.name} takes its namespace from sbrules.yaml; drop --connection-string/--auth"
            )
        if env.endpoint:
            return Namespace(
                f"Endpoint={env.endpoint}", env.auth or "entra", self.timeout,
                max_credits=self.max_credits, credit_share=self.credit_share,
                management_endpoint=management_endpoint, discovery=self.discovery,
                transport=self.transport, proxy=self.proxy, ca_file=self.ca_file,
            )
        variable = env.connection_string_env or ""
        value = os.environ.get(variable)
        if not value:  # a missing connection string is a usage error however it was to be given
            raise click.UsageError(
                f"no connection string: environment {env.name!r} reads it from ${variable}, which is not set "
                "(in Azure Pipelines, map the secret into the step's env)"
            )
        return Namespace(
            value, env.auth or "sas", self.timeout, max_credits=self.max_credits, credit_share=self.credit_share,
            management_endpoint=management_endpoint, discovery=self.discovery,
            transport=self.transport, proxy=self.proxy, ca_file=self.ca_file,
        )

    def without_discovery(self, skip: bool) -> "Namespace":
        """This namespace, with discovery skipped when ``skip`` (--no-discovery)."""
        return dataclasses.replace(self, discovery=False) if skip else self

    @property
    def address(self) -> str:
        """The namespace's host (and port, when not the default): what a saved plan is tied to."""
        from reconciler.namespace.connection import ConnectionString

        endpoint = ConnectionString.parse(require_connection_string(self.connection_string)).endpoint
        return endpoint.removeprefix("sb://").rstrip("/").lower()

    @property
    def network(self) -> "Network":
        """AMQP or WebSockets, the proxy and the CAs trusted: the options, then the connection
        string's TransportType, then the environment (``reconciler.namespace.network``). Over plain AMQP a
        proxy cannot be used: that is said once, and the connection goes direct."""
        if self._network is None:
            from reconciler.namespace.connection import ConnectionString
            from reconciler.namespace.network import NetworkError, resolve

            conn = ConnectionString.parse(require_connection_string(self.connection_string))
            try:
                network = resolve(
                    transport=self.transport, transport_type=conn.transport_type, proxy=self.proxy, ca_file=self.ca_file
                )
            except NetworkError as exc:
                raise click.UsageError(str(exc)) from None
            proxy = network.proxy_for(conn.host)
            if proxy is not None and not network.websockets:
                click.echo(
                    f"note: plain AMQP (port 5671) cannot go through an HTTP proxy: AMQP connects directly, only the "
                    f"management REST API uses the {proxy}; pass --transport websockets to send everything through it",
                    err=True,
                )
            self._network = network
        return self._network

    @property
    def clients(self) -> "Clients":
        """The factory of this command's AMQP and REST clients (one network, one pacer), made at first
        use; the command's end waits for its tier probe."""
        if self._clients is None:
            from reconciler.namespace.clients import Clients

            self._clients = Clients(
                require_connection_string(self.connection_string), auth=self.auth, timeout=self.timeout,
                max_credits=self.max_credits, credit_share=self.credit_share,
                management_endpoint=self.management_endpoint, network=self.network,
            )
            context = click.get_current_context(silent=True)
            if context is not None:
                context.call_on_close(self._clients.close)
        return self._clients


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
    try:
        return check_management_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _environment_management_url(env: "Environment") -> str | None:
    from reconciler.errors import InputError

    try:
        return check_management_url(env.management_endpoint)
    except ValueError as exc:
        raise InputError(f"environment {env.name!r}: management_endpoint {exc}") from None


def check_management_url(value: str | None) -> str | None:
    """``value`` when it is an https URL, or plain http to a loopback host (a token never crosses a
    network unencrypted); ValueError otherwise."""
    import urllib.parse

    from reconciler.namespace.connection import is_loopback

    if value is None:
        return None
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("https", "http") or not url.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    if url.scheme == "http" and not is_loopback(url.hostname):
        raise ValueError(f"{value!r}: plain http is for a loopback host only (an emulator); use https")
    return value


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
        namespace = Namespace(
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


@dataclass(frozen=True)
class Rules:
    """The rules a command works on, the environment they were rendered for, and how many errors
    they have (only ever non-zero when the command was told to go on despite them)."""

    state: "DesiredState"
    environment: "Environment | None"
    errors: int = 0

    @property
    def env_name(self) -> str | None:
        return self.environment.name if self.environment else None


def load_rules(
    paths: tuple[Path, ...], env: str | None, *, lint_errors: bool = True, allow_invalid: bool = False
) -> Rules:
    """The rule files (default ./rules) for ``env``, loaded and linted in one pass, and refused with
    every error (schema, model and, with ``lint_errors``, lint alike) when ``validate`` would call
    them invalid — unless ``allow_invalid``: then the rules that could be built, and the count."""
    from reconciler import diagnostics
    from reconciler.lint import lint
    from reconciler.rulefiles import RuleFileErrors
    from reconciler.rulefiles.environment import load_rules as load_environment
    from reconciler.rulefiles.environment import locate

    source = locate(paths)
    result = load_environment(source, env)
    findings = [*result.diagnostics, *(lint(result.state) if lint_errors else ())]
    errors = sorted((d for d in findings if d.severity == "error"), key=diagnostics.sort_key)
    if errors and not allow_invalid:
        raise RuleFileErrors(errors)
    environment = source.project.environment(env) if source.project and env else None
    return Rules(result.state, environment, len(errors))


def project_owners() -> "Owners":
    """sbrules.yaml's ``owners:`` (none without a project file), found as ``project_environment``
    finds it: for export, which reads no rule files but labels what others own."""
    from reconciler.owners import NO_OWNERS
    from reconciler.rulefiles.environment import DEFAULT_RULES
    from reconciler.rulefiles.project import find_project, read_project

    file = find_project(DEFAULT_RULES if DEFAULT_RULES.is_dir() else Path.cwd())
    return read_project(file).owners if file else NO_OWNERS


def project_environment(env: str | None) -> "Environment | None":
    """The environment ``env`` of the project file found from ./rules or the current directory
    (for commands that read no rule files: apply PLAN.json, export, sample)."""
    if env is None:
        return None
    from reconciler.errors import UsageError
    from reconciler.rulefiles.environment import DEFAULT_RULES
    from reconciler.rulefiles.project import find_project, read_project

    file = find_project(DEFAULT_RULES if DEFAULT_RULES.is_dir() else Path.cwd())
    if file is None:
        raise UsageError(f"--env {env}: no sbrules.yaml in ./rules, here or above, so there are no environments")
    return read_project(file).environment(env)
