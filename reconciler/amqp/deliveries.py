"""Response deliveries taken straight off proton's event collector.

Why: proton's Python reactor wraps every event in an ``Event`` plus ``Delivery``, ``Link``,
``Session``, ``Connection`` and ``Transport`` wrappers and offers it to two handler chains. A
pipelined request costs one event, its response's delivery, and that wrapping and dispatching
was about a fifth of the client's time per request. ``ResponseCollector`` takes deliveries on
receiver links off the collector itself, with the C calls proton's wrappers make, and hands each
complete payload to a callback. Link events that no handler acts on (``quiet``: a link's init,
local open and remote open, six events per subscription read, each wrapped and offered to the
handlers for nothing) are dropped unwrapped; every other event goes through proton as usual.
"""

from __future__ import annotations

import logging
from typing import Callable

import cproton
from proton import Collector, Event

log = logging.getLogger("reconciler.amqp")

#: Receive credit per response link, topped up when half of it is used.
CREDIT = 256

#: (receiver link name, encoded message) → None; must not raise (it runs inside proton's loop).
OnPayload = Callable[[str, bytes], None]

#: Link events proton's own handlers (the reactor's I/O handler and connector) never act on, by the
#: handler method each would call.
LINK_EVENTS = {
    cproton.PN_LINK_INIT: "on_link_init",
    cproton.PN_LINK_LOCAL_OPEN: "on_link_local_open",
    cproton.PN_LINK_REMOTE_OPEN: "on_link_remote_open",
}


def quiet_events(handler: object) -> frozenset[int]:
    """The LINK_EVENTS ``handler`` has no method for: nobody would act on them."""
    return frozenset(kind for kind, method in LINK_EVENTS.items() if not hasattr(handler, method))


class ResponseCollector(Collector):
    """The reactor's collector, reading receiver deliveries before proton would wrap them."""

    def __init__(self, on_payload: OnPayload, quiet: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self._on_payload = on_payload
        self._quiet = quiet

    def peek(self) -> Event | None:
        collector = self._impl
        while True:
            event = cproton.pn_collector_peek(collector)
            if cproton.isnull(event):
                return Event.wrap(event)
            kind = cproton.pn_event_type(event)
            if kind in self._quiet:
                cproton.pn_collector_pop(collector)
                continue
            if kind != cproton.PN_DELIVERY:
                return Event.wrap(event)
            link = cproton.pn_event_link(event)
            if not cproton.pn_link_is_receiver(link):
                return Event.wrap(event)
            try:
                self._receive(link, cproton.pn_event_delivery(event))
            except Exception:  # an exception here would stop proton's loop for everyone
                log.exception("internal error reading a response delivery; it is dropped")
            cproton.pn_collector_pop(collector)

    def _receive(self, link: object, delivery: object) -> None:
        if cproton.pn_delivery_aborted(delivery):
            cproton.pn_delivery_settle(delivery)
            return
        if not cproton.pn_delivery_readable(delivery) or cproton.pn_delivery_partial(delivery):
            return  # more frames of this message are on their way
        size, payload = cproton.pn_link_recv(link, cproton.pn_delivery_pending(delivery))
        if size < 0:
            raise RuntimeError(f"proton could not read the delivery (code {size})")
        cproton.pn_link_advance(link)
        if not cproton.pn_delivery_settled(delivery):  # the emulator and the service send responses settled
            cproton.pn_delivery_update(delivery, cproton.PN_ACCEPTED)
        cproton.pn_delivery_settle(delivery)
        credit = cproton.pn_link_credit(link)
        if credit < CREDIT // 2:
            cproton.pn_link_flow(link, CREDIT - credit)
        self._on_payload(cproton.pn_link_name(link), bytes(payload))
