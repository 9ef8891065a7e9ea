"""One client's bytes served by the emulator's AMQP handler in process: no socket, no thread.

The bytes are pushed into a proton server transport bound to a connection of the emulator's own
loop (``serving_container``, ``server_transport``, as the running emulator builds them) and the
loop's events are dispatched as the running emulator dispatches them, both guards included. Then
time passes (the `$cbs` deadline fires), the client closes its side, and the emulator's state is
checked: ``check`` is the fuzzers' oracle.

Each input gets a fresh emulator (a few tens of microseconds), so an input means the same thing
every time it is run and nothing one input leaves behind changes the next.
"""

from __future__ import annotations

import logging

from reconciler.emulator import Emulator
from reconciler.emulator.frontdoor import server_transport
from reconciler.emulator.server import serving_container

from . import frames
from .conftest import ORDERS

#: The token clock of in-process emulators (the seeds' tokens expire long after it).
NOW = 1_700_000_000.0
#: A management request every input is followed by on the same emulator: it must be answered.
PROBE = frames.management("orders/Subscriptions/all", [("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})])
PROBE_ANSWER = b"statusCode"


def emulator() -> Emulator:
    """The tests' namespace (conftest's ``emulator`` fixture) on an emulator that is never started."""
    emu = Emulator(ORDERS, cbs_deadline=0, token_clock=lambda: NOW)
    emu.namespace.create_queue("work")
    return emu


class Failures(logging.Handler):
    """Collects what the emulator logs at ERROR while an input is served (a guard's traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


def pieces(data: bytes) -> list[bytes]:
    """``data`` cut where a client waiting for each answer would send: after each protocol header and
    each frame (by the frame's own size field, whatever it says)."""
    out = []
    at = 0
    while at < len(data):
        if data.startswith(b"AMQP", at):
            size = 8
        else:
            size = max(8, int.from_bytes(data[at:at + 4], "big"))
        out.append(data[at:at + size])
        at += size
    return out


def serve(emu: Emulator, data: bytes) -> bytes:
    """Serve ``data`` as one client connection's bytes; what the emulator wrote back."""
    loop = serving_container(emu.handler)
    transport = server_transport(loop, ("127.0.0.1", 5672))
    answer = bytearray()

    def run() -> None:
        loop.process()
        while (pending := transport.pending()) > 0:
            answer.extend(transport.peek(pending))
            transport.pop(pending)
            loop.process()

    run()
    for piece in pieces(data):
        while piece and (capacity := transport.capacity()) > 0:
            transport.push(piece[:capacity])
            piece = piece[capacity:]
            run()
    loop.timer_tick()  # the $cbs deadline (0 s here) passes
    run()
    transport.close_tail()
    run()
    transport.close_head()
    run()
    return bytes(answer)


def check(emu: Emulator, data: bytes) -> None:
    """Serve ``data``, then fail (AssertionError) if the emulator did not come out of it whole: an
    error inside a guard, anything of the connection still held, or another client's request unanswered."""
    log = logging.getLogger("reconciler.emulator")
    failures = Failures()
    log.addHandler(failures)
    try:
        serve(emu, data)
        handler = emu.handler
        assert handler.errors == 0, f"{handler.errors} error(s) inside the guards:\n" + "\n".join(failures.records)
        assert not handler.connections, f"connection state kept after the transport closed: {handler.connections}"
        assert not handler.links, f"link roles kept after the transport closed: {list(handler.links.values())}"
        assert not handler.transfers.message_links, "receivers kept after the transport closed"
        answer = serve(emu, PROBE)
        assert PROBE_ANSWER in answer and handler.errors == 0, "the next client's management request was not answered"
    finally:
        log.removeHandler(failures)

