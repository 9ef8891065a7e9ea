"""Answering a connection over the emulator's connection limit without serving it.

The front door accepts a connection it cannot admit only to say why, as the service does: an AMQP
client gets the protocol header, an ``open`` and a ``close`` whose error is
``amqp:resource-limit-exceeded`` (what Service Bus sends when a quota such as the namespace's
connection count is reached; Microsoft's SDKs report it with that condition), after the SASL
exchange when the client starts with one; a plain HTTP client gets ``503``; a TLS one is closed
(a 503 would need a handshake first). These few frames are
written here with the project's wire codec, on the front door's thread, so proton's event loop
never sees the connection.
"""

from __future__ import annotations

import struct

from proton import Described, symbol, ubyte, ulong

from reconciler.amqp.wire.encode import encode_value

#: The condition Service Bus closes a connection with when a quota (here: connections) is exceeded.
QUOTA_CONDITION = "amqp:resource-limit-exceeded"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
_AMQP_FRAME, _SASL_FRAME = 0, 1
_OPEN, _CLOSE, _ERROR = 0x10, 0x18, 0x1D
_SASL_MECHANISMS, _SASL_OUTCOME = 0x40, 0x44
HTTP_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: 46\r\n\r\nthe emulator is at its connection limit; retry"
)


def frame(kind: int, code: int, fields: list[object]) -> bytes:
    """One AMQP or SASL frame on channel 0 carrying the performative ``code`` with ``fields``."""
    body = encode_value(Described(ulong(code), fields))
    return struct.pack(">IBBH", 8 + len(body), 2, kind, 0) + body


def quota_close(description: str) -> bytes:
    """The AMQP header, an ``open`` and the ``close`` carrying the quota error."""
    # info written out as null: the Python SDK reads all three fields of an error
    error = Described(ulong(_ERROR), [symbol(QUOTA_CONDITION), description, None])
    return AMQP_HEADER + frame(_AMQP_FRAME, _OPEN, ["sbrules-emulator"]) + frame(_AMQP_FRAME, _CLOSE, [error])


class Refusal:
    """What to write back to an over-limit connection as its bytes arrive (a small state machine).

    ``feed`` takes what the client sent and returns what to send; ``done`` says the connection
    may then be closed.
    """

    def __init__(self, description: str) -> None:
        self._description = description
        self._buffer = bytearray()
        self._stage = "header"
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = b""
        while not self.done:
            step = self._step()
            if step is None:
                break
            out += step
        return out

    def _step(self) -> bytes | None:
        buffer = self._buffer
        if self._stage == "http":
            self.done = True
            return HTTP_503
        if self._stage in ("header", "amqp-header"):
            first = bytes(buffer[:1])
            if self._stage == "header" and first == b"\x16":  # TLS: no 503 without a handshake
                self.done = True
                return b""
            if self._stage == "header" and first not in (b"", b"A"):
                self._stage = "http"
                return b""
            if len(buffer) < 8:
                return None
            header = bytes(buffer[:8])
            del buffer[:8]
            if header == SASL_HEADER and self._stage == "header":
                self._stage = "sasl-init"
                return SASL_HEADER + frame(_SASL_FRAME, _SASL_MECHANISMS, [symbol("ANONYMOUS")])
            self.done = True
            return quota_close(self._description) if header[:4] == b"AMQP" else b""
        # sasl-init: one whole frame, whatever it says; the outcome is ok, the open then refused.
        if len(buffer) < 4:
            return None
        size = struct.unpack(">I", buffer[:4])[0]
        if size < 8 or len(buffer) < size:
            self.done = size < 8
            return None
        del buffer[:size]
        self._stage = "amqp-header"
        return frame(_SASL_FRAME, _SASL_OUTCOME, [ubyte(0)])
