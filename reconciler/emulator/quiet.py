"""A client that goes away is not an error: proton's own log lines for a peer that closed first,
taken down to DEBUG while the emulator runs.

Microsoft's SDK closes its socket without waiting for the emulator's last frames, so proton's I/O
handler meets a broken pipe (or a reset) on its next send and logs it at ERROR on the ``proton``
logger, as it does a transport error for a frame that arrives after the close (a detach on a
channel already ended). Those are how a normal close looks from the server's side; every other
proton error is left as it is.
"""

from __future__ import annotations

import logging
import re

_PEER_GONE = re.compile(
    r"Couldn't (send|recv): (BrokenPipeError|ConnectionResetError|ConnectionAbortedError)"
    r"|connection aborted|unknown (channel|handle)|detach.*(unknown|ended|closed)",
    re.IGNORECASE,
)


class PeerGoneFilter(logging.Filter):
    """Turns proton's ERROR for a peer that already closed into a DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and _PEER_GONE.search(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


FILTER = PeerGoneFilter()


def install() -> None:
    """Quiet proton's logger for peers that closed first (idempotent)."""
    logger = logging.getLogger("proton")
    if FILTER not in logger.filters:
        logger.addFilter(FILTER)
