"""A running emulated namespace: AMQP and the management REST API on one port, plus optional persistence.

``with Emulator(desired) as emu:`` gives tests and the demo a live namespace on a free loopback
port in well under a second; ``emu.connection_string`` works with Microsoft's SDK (``ServiceBusClient``
and, given ``connection_verify=emu.ca_file``, ``ServiceBusAdministrationClient``) and with
``reconciler.amqp`` / ``reconciler.rest``; ``emu.publish`` sends messages as a publisher would.
``emu.namespace``, ``emu.faults`` and ``emu.credits`` (the namespace's credit meter) are the test API.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import logging
import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from proton.reactor import ApplicationEvent

from reconciler import model
from reconciler.amqp import reactor
from reconciler.amqp.messages import encode_model_message
from reconciler.emulator import quiet, rest
from reconciler.emulator import state as persistence
from reconciler.emulator.auth import LISTEN, SEND, TokenValidator
from reconciler.emulator.broker import Broker
from reconciler.emulator.durability import GroupCommit
from reconciler.emulator.faults import Faults
from reconciler.emulator.frontdoor import DEFAULT_MAX_CONNECTIONS, FrontDoor
from reconciler.emulator.namespace import LOCK_DURATION, Namespace, parse_address
from reconciler.emulator.server import ServerHandler, serving_container
from reconciler.emulator.throttling import CreditMeter
from reconciler.errors import SbrulesError
from reconciler.extras import require
from reconciler.names import name_key

if TYPE_CHECKING:
    from reconciler.emulator.certs import ServerIdentity

log = logging.getLogger("reconciler.emulator")

#: The development key, as in Microsoft's own emulator; documented, never a secret.
DEV_KEY_NAME = "RootManageSharedAccessKey"
DEV_KEY = "SAS_KEY_VALUE"


class EmulatorError(SbrulesError):
    """The emulator could not start (port in use, unreadable state file, ...)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Emulator:
    """An emulated Service Bus namespace served over AMQP 1.0 (context manager).

    ``token_clock`` is the Unix time that put tokens expire by; a test passes a clock it moves, so
    expiry and refresh are checked without waiting for them.
    """

    def __init__(
        self,
        desired: model.DesiredState | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        key_name: str = DEV_KEY_NAME,
        key: str = DEV_KEY,
        state_file: str | Path | None = None,
        faults: Faults | None = None,
        cbs_deadline: float = 20.0,
        lock_duration: _dt.timedelta = LOCK_DURATION,
        listen_keys: Mapping[str, str] | None = None,
        token_clock: Callable[[], float] = time.time,
        entra_signing_key: str | None = None,
        credit_clock: Callable[[], float] = time.monotonic,
        max_connections: int | None = None,
    ) -> None:
        """``listen_keys`` (name → key) are further shared access keys with Listen and Send rights but
        not Manage: AMQP accepts them, the management REST API answers them 401, as the service does.

        ``entra_signing_key`` (development only, at least 32 bytes) makes the namespace accept Entra
        ID tokens signed HS256 with it, on ``$cbs`` and as ``Bearer`` tokens on the management API
        (``reconciler.emulator.auth``); without it, as by default, only SAS tokens are accepted.
        ``credit_clock`` is the time the namespace's credits are counted by (``faults.credits_per_second``).
        ``max_connections`` caps the connections served at once (``frontdoor.py``; None: its default);
        more are refused."""
        self.host = host
        self.port = port
        self.max_connections = DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
        if self.max_connections < 1:
            raise EmulatorError("max_connections must be at least 1")
        self.key_name = key_name
        self._key = key
        self._listen_keys = dict(listen_keys or {})
        self.state_file = Path(state_file) if state_file is not None else None
        self.faults = faults or Faults()
        #: The namespace's credits: every client's AMQP and REST work is charged to it.
        self.credits = CreditMeter(self.faults, credit_clock)
        self.namespace = Namespace()
        #: Whether the namespace came from the state file; ``desired`` then only adds what it lacks.
        self.restored = self.state_file is not None and persistence.load(self.namespace, self.state_file)
        if desired is not None:
            self._seed_missing(desired, replace=not self.restored)
        self.broker = Broker(self.namespace, lock_duration)
        try:
            validator = TokenValidator(
                {**self._listen_keys, key_name: key},
                {name: frozenset({LISTEN, SEND}) for name in self._listen_keys},
                entra_key=entra_signing_key,
            )
        except ValueError as exc:
            raise EmulatorError(str(exc)) from None
        self.handler = ServerHandler(
            self.namespace, self.broker, validator, self.faults, cbs_deadline, token_clock, self.credits
        )
        self._api = rest.ManagementApi(self.namespace, validator, self.credits, self.faults)
        self._identity: ServerIdentity | None = None
        self._tls: ssl.SSLContext | None = None
        self._tls_lock = threading.Lock()
        self._ca_dir: tempfile.TemporaryDirectory | None = None
        self._front: FrontDoor | None = None
        self._thread: threading.Thread | None = None
        self._injector: reactor.Injector | None = None
        #: Responses to writes wait for the state file to hold them (None: no state file).
        self._commit: GroupCommit | None = None
        if self.state_file is not None:
            self._commit = GroupCommit(self.namespace, self.state_file, self._run_on_loop)
            self.handler.nodes.commit = self._commit
            self._api.commit = self._commit

    def __repr__(self) -> str:
        return f"Emulator(host={self.host!r}, port={self.port}, key_name={self.key_name!r})"

    def _seed_missing(self, desired: model.DesiredState, replace: bool) -> None:
        if replace:
            self.namespace.seed(desired)
            return
        for topic, sub in desired.subscriptions():
            if name_key(topic.name) not in self.namespace.topics or name_key(sub.name) not in self.namespace.topics[
                name_key(topic.name)
            ].subscriptions:
                self.namespace.create_subscription(topic.name, sub.name, sub.rules)
        for topic in desired.topics:
            self.namespace.create_topic(topic.name)

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def key(self) -> str:
        """The shared access key clients sign with (kept out of repr and logs)."""
        return self._key

    @property
    def connection_string(self) -> str:
        """For every client: AMQP and the management API share this one endpoint."""
        return self.connection_string_for(self.key_name, self._key)

    def connection_string_for(self, key_name: str, key: str) -> str:
        return (
            f"Endpoint=sb://{self._endpoint_host()}:{self.port};SharedAccessKeyName={key_name};"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true"
        )

    @property
    def ca_pem(self) -> bytes:
        """The PEM certificate of this run's CA, which signed the HTTPS certificate."""
        return self._server_identity().ca_pem

    @property
    def ca_file(self) -> str:
        """A file holding ``ca_pem`` (for the SDK's ``connection_verify``), removed when the emulator stops."""
        with self._tls_lock:
            if self._ca_dir is None:
                self._ca_dir = tempfile.TemporaryDirectory(prefix="sbrules-emulator-")
            path = Path(self._ca_dir.name, "ca.pem")
        if not path.exists():
            path.write_bytes(self.ca_pem)
        return str(path)

    def write_ca(self, path: str | Path) -> Path:
        """Write the CA certificate to ``path`` (what ``sbrules emulator --ca-file`` does)."""
        target = Path(path)
        target.write_bytes(self.ca_pem)
        return target

    def _server_identity(self) -> "ServerIdentity":
        """Made on first use: most runs never see an HTTPS client, and key generation is not free
        (nor installed: cryptography comes with the ``emulator`` extra)."""
        with self._tls_lock:
            if self._identity is None:
                require("cryptography", "emulator", "the emulator's HTTPS endpoint")
                from reconciler.emulator import certs

                self._identity = certs.make_identity(self._endpoint_host())
            return self._identity

    def _tls_context(self) -> ssl.SSLContext:
        identity = self._server_identity()
        with self._tls_lock:
            if self._tls is None:
                self._tls = identity.server_context()
            return self._tls

    def _endpoint_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host

    def start(self) -> "Emulator":
        if self._thread is not None:
            return self
        if self._commit is not None:  # what it was seeded with is on disk before anyone is served
            self._commit.save()
        if not is_loopback(self.host):
            log.warning("emulator: listening on non-loopback %s without TLS, with a development key", self.host)
        quiet.install()
        container = serving_container(self.handler)
        injector = reactor.Injector()
        container.selectable(injector)
        self._injector = injector

        def hand_to_proton(sock: socket.socket, address: tuple) -> None:
            injector.trigger(ApplicationEvent("emulator_adopt", subject=(sock, address)))

        try:
            front = FrontDoor(
                self.host, self.port, hand_to_proton,
                lambda scheme: rest.handler_class(self._api, scheme), self._tls_context, self.max_connections,
            )
        except OSError as exc:
            raise EmulatorError(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        self.port = front.port
        self.handler.on_amqp_closed = front.release

        def serve() -> None:
            try:
                container.run()
            except Exception:  # report, never die silently
                log.exception("emulator: event loop stopped with an error")
            finally:
                injector.release()

        self._thread = threading.Thread(target=serve, name="sbrules-emulator", daemon=True)
        self._thread.start()
        front.start()
        self._front = front
        if self._commit is not None:
            self._commit.start()
        return self

    def stop(self) -> None:
        """Close every connection, stop the loop and write the state file one last time."""
        if self._thread is None:
            return
        if self._front is not None:
            self._front.close()
            self._front = None
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("emulator_stop"))
        self._thread.join(10)
        self._thread = None
        if self._ca_dir is not None:
            self._ca_dir.cleanup()
            self._ca_dir = None
        if self._commit is not None:
            self._commit.stop()
        self.save()

    def save(self) -> None:
        """Write the state file now (no-op without one)."""
        if self._commit is not None:
            self._commit.save()

    def when_saved(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (on the event loop) once the state file holds every change made so far."""
        if self._commit is None:
            raise EmulatorError("this emulator has no state file")
        self._commit.after_commit(callback)

    def _run_on_loop(self, calls: list[Callable[[], None]]) -> None:
        if self._injector is not None:
            self._injector.trigger(ApplicationEvent("emulator_run", subject=calls))

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def open_connections(self) -> int:
        """Connections counted against ``max_connections`` now (0 when not serving)."""
        return self._front.open if self._front is not None else 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- messages ----------------------------------------------------------------------------------
    def publish(self, entity: str, messages: Iterable[model.Message]) -> None:
        """Send messages to a topic (routed by its subscriptions' rules) or a queue, as a publisher
        would, without an AMQP connection; raises OperationError when the entity does not exist."""
        address = parse_address(entity)
        for message in messages:
            self.broker.publish(address, encode_model_message(message))
