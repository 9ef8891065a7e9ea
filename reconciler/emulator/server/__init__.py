"""The emulator's AMQP 1.0 server: a proton handler (``handler``) and the roles its links play (``links``)."""

from reconciler.emulator.server.handler import ServerHandler

__all__ = ["ServerHandler"]
