"""proton's ``Container`` without the TLS settings it would build and sbrules never uses.

A ``Container`` builds a default client and server ``SSLDomain`` as it is made, about 100 ms each
(OpenSSL loads its configuration for each), a fifth of a short command's start-up. sbrules gives
every TLS connection a domain of its own (``engine.client_ssl_domain``) and the emulator does TLS in
its front door, so neither reads those defaults: a container made here has none (``ssl`` is None,
as proton leaves it where OpenSSL is missing).
"""

from __future__ import annotations

import os
import socket
import threading

import proton
from proton import Handler, SSLUnavailable
from proton import _reactor as proton_reactor
from proton.handlers import IOHandler
from proton.reactor import ApplicationEvent, Container, EventInjector

_SWAP = threading.Lock()


class _NoDefaultTLS:
    """Stands in for proton's ``SSLConfig`` while a container is made: proton then keeps none."""

    def __init__(self) -> None:
        raise SSLUnavailable("sbrules gives each TLS connection its own domain")


def container(*handlers: Handler) -> Container:
    """A ``Container`` of ``handlers`` whose ``ssl`` is None (see the module docstring)."""
    if not hasattr(proton_reactor, "SSLConfig"):  # a proton that builds its defaults elsewhere
        return Container(*handlers)
    with _SWAP:
        default = proton_reactor.SSLConfig
        proton_reactor.SSLConfig = _NoDefaultTLS
        try:
            return Container(*handlers)
        finally:
            proton_reactor.SSLConfig = default


def attach_socket(container: Container, transport: proton.Transport, sock: socket.socket) -> None:
    """Make ``sock``, already connected, the byte stream of ``transport`` (on the loop thread): the
    last steps proton's own acceptor and connector take. Its connection must have an ``_acceptor``,
    which tells proton's I/O handler not to connect out by itself."""
    selectable = container.selectable(delegate=sock)
    selectable._transport = transport
    transport._selectable = selectable
    IOHandler.update(transport, selectable, container.now)


class Injector(EventInjector):
    """proton's ``EventInjector``, whose pipe is closed once its loop is done: proton never closes it,
    so every client and emulator left two file descriptors behind, and a long-lived process (a test
    suite) ran past the 1,024 that ``select`` can watch. Events triggered after :meth:`release` are
    dropped (nobody would read them)."""

    def __init__(self) -> None:
        super().__init__()
        self._release_lock = threading.Lock()
        self._released = False

    def trigger(self, event: ApplicationEvent) -> None:
        with self._release_lock:
            if not self._released:
                super().trigger(event)

    def close(self) -> None:
        with self._release_lock:
            if not self._released:
                super().close()

    def release(self) -> None:
        """Close the pipe; call it when the loop has stopped."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
            for fd in self.pipe:
                os.close(fd)
