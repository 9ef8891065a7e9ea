"""Canaries for the private parts of lark and python-qpid-proton that sbrules relies on.

pyproject.toml bounds both libraries to the versions tested. When a new version is let in, these
tests say which private API moved and which module uses it, instead of a parse or a connection
failing somewhere far away. Each test exercises the API the way the code does, not just its name.
"""

from __future__ import annotations

import ast
import contextlib
import socket
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Iterator

import pytest

RECONCILER = Path(resources.files("reconciler"))  # type: ignore[arg-type]


@contextlib.contextmanager
def private_api(distribution: str, api: str, used_by: str) -> Iterator[None]:
    """Turn any failure inside into one message naming the private API and its user."""
    try:
        yield
    except Exception as exc:  # every kind of breakage gets the same explanation
        pytest.fail(
            f"{distribution} {metadata.version(distribution)}: the private API {api} used by {used_by} "
            f"no longer works as it did ({type(exc).__name__}: {exc}). Adapt {used_by} before raising "
            f"the upper bound on {distribution} in pyproject.toml.",
            pytrace=False,
        )


# -- lark: reconciler/sql/lalr.py runs lark's LALR table with lark's callbacks ---------------------


@pytest.fixture(scope="module", params=["built", "loaded from the cache"])
def lark_parser(request, tmp_path_factory):
    """Lark as the parser module gets it: built from the grammar, or (every later run) loaded from
    the table cache, which restores less of the object than building makes."""
    from lark import Lark

    grammar = resources.files("reconciler.sql").joinpath("grammar.lark").read_text(encoding="utf-8")
    options: dict = {"parser": "lalr", "lexer": "basic", "start": ["filter", "action"], "maybe_placeholders": False}
    if request.param == "built":
        return Lark(grammar, **options)
    cache = str(tmp_path_factory.mktemp("lark") / "tables.pickle")
    Lark(grammar, cache=cache, **options)
    return Lark(grammar, cache=cache, **options)


def test_lark_parse_table_shape(lark_parser) -> None:
    with private_api("lark", "Lark.parser.parser.parser.parse_table", "reconciler/sql/lalr.py (Driver)"):
        table = lark_parser.parser.parser.parser.parse_table
        assert set(table.start_states) >= {"filter", "action"} and set(table.end_states) >= {"filter", "action"}
        kinds = set()
        for actions in table.states.values():
            for symbol, (action, arg) in actions.items():
                kinds.add(action.name)
                if action.name == "Shift":
                    assert isinstance(arg, int) and arg in table.states, (symbol, arg)
                else:
                    assert action.name == "Reduce", action.name
                    assert isinstance(arg.expansion, (list, tuple)) and isinstance(arg.origin.name, str), arg
        assert kinds == {"Shift", "Reduce"}, kinds


def test_lark_reduce_callbacks(lark_parser) -> None:
    api = "Lark._callbacks and lark.parse_tree_builder.ExpandSingleChild"
    with private_api("lark", api, "reconciler/sql/lalr.py (Driver)"):
        from lark.parse_tree_builder import ExpandSingleChild

        callbacks = lark_parser._callbacks
        rules = {
            arg
            for actions in lark_parser.parser.parser.parser.parse_table.states.values()
            for action, arg in actions.values()
            if action.name == "Reduce"
        }
        assert rules and all(callable(callbacks[rule]) for rule in rules)
        # `?rule: child` reductions pass their child through; the driver skips them by this type.
        assert any(isinstance(callbacks[r], ExpandSingleChild) for r in rules if len(r.expansion) == 1)


def test_lark_terminal_definitions(lark_parser) -> None:
    api = "Lark.terminals / Lark.lexer_conf.ignore / lark.lexer.PatternStr / Pattern.to_regexp"
    with private_api("lark", api, "reconciler/sql/lalr.py (Scanner)"):
        import re

        from lark.lexer import PatternStr

        names = {t.name for t in lark_parser.terminals}
        assert {"IDENT", "STRING", "AND"} <= names and lark_parser.lexer_conf.ignore
        for term in lark_parser.terminals:
            re.compile(term.pattern.to_regexp())
            assert isinstance(term.priority, int) and term.pattern.max_width >= 1
        keyword = next(t for t in lark_parser.terminals if t.name == "AND")
        assert isinstance(keyword.pattern, PatternStr) and "i" in keyword.pattern.flags
        assert keyword.pattern.value == "AND"


def _shape(node: Any) -> Any:
    """A tree as plain data; tokens of either scanner become (type, text)."""
    if hasattr(node, "data"):
        return (str(node.data), [_shape(child) for child in node.children])
    return (str(node.type), str(node.value) if hasattr(node, "value") else str(node))


@pytest.mark.parametrize(
    ("start", "text"),
    [("filter", "a = 1 AND (b LIKE 'x%' OR NOT c IN (1, 2.5, @p))"), ("action", "SET a = b + 1; REMOVE [c d]")],
)
def test_lalr_driver_builds_what_lark_builds(lark_parser, start: str, text: str) -> None:
    """The whole private path at once: our scanner and driver over lark's table and callbacks."""
    from reconciler.sql.lalr import Driver, Scanner, end_position

    with private_api("lark", "the LALR parse table and callbacks together", "reconciler/sql/lalr.py"):
        scanner = Scanner(lark_parser, "IDENT", lambda token: None)
        ours = Driver(lark_parser, start).parse(scanner.scan(text), end_position(text))
        assert _shape(ours) == _shape(lark_parser.parse(text, start=start))


# -- proton: reconciler/amqp/ (engine, connector, links, deliveries), reconciler/emulator/ ---------------


def test_container_reads_events_from_the_collector_put_in_its_place() -> None:
    from proton import Collector
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class CountingCollector(Collector):
        def __init__(self) -> None:
            super().__init__()
            self.peeks = 0

        def peek(self):
            self.peeks += 1
            return super().peek()

    fired: list[bool] = []

    class Stop(MessagingHandler):
        def on_timer_task(self, event) -> None:
            fired.append(True)
            event.container.stop()

    with private_api("python-qpid-proton", "Container._collector", "reconciler/amqp/engine.py (ResponseCollector)"):
        container = Container()
        assert isinstance(container._collector, Collector)
        container._collector = collector = CountingCollector()
        container.schedule(0, Stop())
        container.run()
        assert fired and collector.peeks > 0


def test_collector_handle_and_cproton_calls() -> None:
    """ResponseCollector drives proton's C collector directly through cproton."""
    with private_api("python-qpid-proton", "cproton and Collector._impl", "reconciler/amqp/deliveries.py"):
        import cproton
        from proton import Collector, Event

        collector = Collector()
        event = cproton.pn_collector_peek(collector._impl)
        assert cproton.isnull(event) and Event.wrap(event) is None
        used = sorted(_cproton_names_used())
        assert used, "no cproton use found: drop this canary"
        missing = [name for name in used if not hasattr(cproton, name)]
        assert not missing, f"cproton lacks {', '.join(missing)}"


def test_proton_own_handlers_ignore_the_link_events_the_collector_drops() -> None:
    """ResponseCollector drops link events its handler has no method for, on the premise that the
    reactor's own handlers (I/O, connector, the global overrides) never act on them either."""
    with private_api("python-qpid-proton", "IOHandler, _Connector, GlobalOverrides", "reconciler/amqp/deliveries.py"):
        from proton._reactor import GlobalOverrides, _Connector
        from proton.handlers import IOHandler

        from reconciler.amqp.deliveries import LINK_EVENTS, quiet_events

        for own in (IOHandler, _Connector, GlobalOverrides):
            assert quiet_events(own) == frozenset(LINK_EVENTS), own.__name__


def _cproton_names_used() -> set[str]:
    """Every ``cproton.<name>`` the package uses, read from its source."""
    names = set()
    for path in RECONCILER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cproton":
                names.add(node.attr)
    return names


def test_a_socket_accepted_elsewhere_becomes_an_amqp_server_connection() -> None:
    """The emulator's front door accepts sockets itself and hands AMQP ones to proton, repeating the
    private steps of proton's own Acceptor (``adopt_amqp``); the WebSocket tunnel hands proton a
    client socket with the same steps (``reactor.attach_socket``)."""
    import threading

    from proton.handlers import MessagingHandler
    from proton.reactor import ApplicationEvent, Container, EventInjector

    from reconciler.emulator.frontdoor import adopt_amqp

    class Stopper(MessagingHandler):
        def on_stop(self, event) -> None:
            container.stop()

    api = "Connection._acceptor, Selectable._transport, Transport._selectable, IOHandler.update"
    with private_api("python-qpid-proton", api, "reconciler/amqp/reactor.py (attach_socket)"):
        ours, theirs = socket.socketpair()
        container = Container(Stopper())
        injector = EventInjector()
        container.selectable(injector)
        adopt_amqp(container, ours, ("127.0.0.1", 0))
        loop = threading.Thread(target=container.run, daemon=True)
        loop.start()
        try:
            theirs.settimeout(10)
            theirs.sendall(b"AMQP\x00\x01\x00\x00")
            assert theirs.recv(8) == b"AMQP\x00\x01\x00\x00"  # proton's server transport answers
        finally:
            injector.trigger(ApplicationEvent("stop"))
            loop.join(10)
            theirs.close()
        assert not loop.is_alive()


def test_acceptor_exposes_its_listening_socket() -> None:
    from proton.reactor import Container

    with private_api("python-qpid-proton", "Acceptor._selectable.getsockname()", "tests/amqp/wire_server.py"):
        container = Container()
        acceptor = container.listen("127.0.0.1:0")
        try:
            port = acceptor._selectable.getsockname()[1]
            assert port > 0
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        finally:
            acceptor.close()


def test_attributes_set_on_endpoints_survive_rewrapping() -> None:
    """The engine and the emulator keep their own state on proton objects (``conn._sbrules_generation``,
    ``link._sb_*``, ``delivery._sb_lock``); proton's wrappers store such attributes in the C object's
    record, so the wrapper an event hands out later still carries them."""
    import proton

    users = "reconciler/amqp/connector.py and links.py, reconciler/emulator/"
    with private_api("python-qpid-proton", "Wrapper attribute records", users):
        connection = proton.Connection()
        connection._sb_state = "mine"
        session = connection.session()
        sender = session.sender("s")
        sender._sb_kind = "sender"
        delivery = sender.delivery(b"tag")
        delivery._sb_lock = 42
        assert session.connection._sb_state == "mine"
        assert connection.link_head(0)._sb_kind == "sender"
        assert sender.current._sb_lock == 42
