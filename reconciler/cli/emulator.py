"""``sbrules emulator``: serve a local Service Bus namespace over AMQP 1.0 until interrupted."""

from __future__ import annotations

import importlib.util
import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler.app.operations import load_rules
from reconciler.cli.common import env_option
from reconciler.errors import SbrulesError
from reconciler.namespace.credits import THROTTLE_TIERS

if TYPE_CHECKING:
    from reconciler.emulator import Emulator
    from reconciler.model import DesiredState


@click.command()
@click.option("--rules", "rules", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Rule files or directories; every topic and subscription they declare is created.")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Seed from a Config.json of Microsoft's Service Bus emulator (sbrules render --format emulator-config).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=5672, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0 = any free port).")
@click.option("--state", "state", type=click.Path(dir_okay=False, path_type=Path),
              help="State file: loaded at start if it exists, rewritten atomically (fsynced) on change and at exit; "
                   "a rule or entity write is acknowledged only once it is on disk.")
@click.option("--key-name", default=None, help="Shared access key name (default RootManageSharedAccessKey).")
@click.option("--key", default=None, help="Shared access key (default: the documented development key).")
@click.option("--faults", "faults_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML/JSON file of injected faults (latency, busy_fraction, close_after_ops, drop_after_applying, "
                   "drop_before_applying, refuse_cbs, seed) "
                   "and credit throttling (credits_per_second, credit_costs, throttled_wait_seconds).")
@click.option("--throttle", type=click.Choice(sorted(THROTTLE_TIERS)), default=None,
              help="Model a tier's credit-based throttling: standard = 1000 credits/s for the namespace, shared by "
                   "every client (10 per management operation, 1 per message and per filter evaluation), answered "
                   "server-busy when spent; none = no credits, as on Premium. Overrides the faults file's "
                   "credits_per_second.  [default: none]")
@click.option("--ca-file", "ca_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the CA certificate of the management API's HTTPS endpoint here (default: a temporary file, "
                   "named on stderr).")
@click.option("--entra-signing-key", envvar="SBRULES_EMULATOR_ENTRA_KEY", show_envvar=True,
              help="Development only: also accept Entra ID tokens (--auth entra) signed HS256 with this key "
                   "(at least 32 bytes); every such token gets every right. Off by default.")
@click.option("--max-connections", type=click.IntRange(1, 900), default=None,
              help="Connections served at once (AMQP, WebSocket, HTTP and not yet identified); more are refused "
                   "(AMQP: amqp:resource-limit-exceeded, HTTP: 503). At most 900: the event loop cannot watch "
                   "descriptors past 1024.  [default: 300]")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (AMQP has no TLS).")
@click.option("-v", "--verbose", is_flag=True, help="Log connections and errors to stderr.")
@env_option
def emulator(
    rules: tuple[Path, ...],
    config: Path | None,
    host: str,
    port: int,
    state: Path | None,
    key_name: str | None,
    key: str | None,
    faults_file: Path | None,
    throttle: str | None,
    ca_file: Path | None,
    entra_signing_key: str | None,
    max_connections: int | None,
    allow_remote: bool,
    verbose: bool,
    env: str | None,
) -> None:
    """Run a local Service Bus emulator; the first stdout line is its connection string.

    With --env, it is seeded with that environment's rendered rules (of --rules, default ./rules).
    """
    from reconciler.emulator import DEV_KEY, DEV_KEY_NAME, Emulator, Faults

    _check(key_name, key, entra_signing_key, host, allow_remote)
    # Only a command that is going to serve takes over logging.
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s", force=True)
    desired = _seed(config, rules, env)
    faults = Faults.load(faults_file) if faults_file is not None else Faults()
    if throttle is not None:
        faults.update(credits_per_second=THROTTLE_TIERS[throttle])
    emu = Emulator(
        desired,
        host=host,
        port=port,
        key_name=key_name or DEV_KEY_NAME,
        key=key or DEV_KEY,
        state_file=state,
        faults=faults,
        entra_signing_key=entra_signing_key,
        max_connections=max_connections,
    )
    if desired is not None and emu.restored:
        click.echo(
            f"warning: --rules: the namespace was restored from {state}, so only the topics and subscriptions "
            "missing from it were created from the rule files; the others keep their saved rules (delete the "
            "state file to start from the rule files)",
            err=True,
        )
    _serve(emu, host, ca_file, entra=entra_signing_key is not None)
    click.echo("emulator stopped" + (f"; state saved to {state}" if state else ""), err=True)


def _check(key_name: str | None, key: str | None, entra_signing_key: str | None, host: str, allow_remote: bool) -> None:
    """Refuse options that do not go together, and a non-loopback host unless --allow-remote (then warn)."""
    from reconciler.emulator.emulator import is_loopback

    if key_name is not None and key is None:
        raise click.UsageError("--key-name needs --key")
    if entra_signing_key is not None:
        from reconciler.emulator.auth import ENTRA_KEY_MIN_BYTES

        if len(entra_signing_key.encode("utf-8")) < ENTRA_KEY_MIN_BYTES:
            raise click.UsageError(f"--entra-signing-key must be at least {ENTRA_KEY_MIN_BYTES} bytes (HS256)")
    if not is_loopback(host):
        if not allow_remote:
            raise SbrulesError(
                f"refusing to listen on non-loopback host {host!r}: the emulator speaks plain AMQP with a "
                "development key; pass --allow-remote to do it anyway"
            )
        click.echo(f"warning: listening on {host} without TLS; anyone who can reach it can use the namespace", err=True)


def _seed(config: Path | None, rules: tuple[Path, ...], env: str | None) -> "DesiredState | None":
    """The entities to start with: a Config.json's, the rule files' (an environment's rendering), or none."""
    if config is not None:
        if rules or env:
            raise click.UsageError("--config seeds the emulator on its own: drop --rules and --env")
        return _read_config(config)
    if rules or env:
        return load_rules(rules, env, lint_errors=False).state
    return None


def _serve(emu: "Emulator", host: str, ca_file: Path | None, *, entra: bool) -> None:
    """Serve until SIGINT or SIGTERM: the connection string first on stdout, then what to know on stderr."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with emu:
            click.echo(emu.connection_string)
            click.echo(f"sbrules emulator listening on {host}:{emu.port} (Ctrl-C to stop)", err=True)
            if entra:
                click.echo("development only: Entra ID tokens signed with --entra-signing-key get every right", err=True)
            if ca_file is not None or importlib.util.find_spec("cryptography") is not None:
                ca_path = emu.write_ca(ca_file) if ca_file else emu.ca_file
                click.echo(
                    f"management API (ATOM/REST) on the same port: https for ServiceBusAdministrationClient with "
                    f"connection_verify={ca_path}; plain http for sbrules", err=True,
                )
            else:
                click.echo(
                    "management API (ATOM/REST) on the same port: plain http for sbrules (https, for Microsoft's "
                    "ServiceBusAdministrationClient, comes with pip install 'sbrules[emulator]')", err=True,
                )
            while not stop.wait(0.5):
                if not emu.running:
                    raise SbrulesError("the emulator's event loop stopped unexpectedly")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _read_config(path: Path) -> "DesiredState":
    """The topology of a Config.json; its errors stop the command, located, as invalid rule files do."""
    from reconciler.rulefiles import RuleFileErrors
    from reconciler.rulefiles.emulator_config import read_config

    state, findings = read_config(path)
    errors = [d for d in findings if d.severity == "error"]
    if errors:
        raise RuleFileErrors(errors)
    return state
