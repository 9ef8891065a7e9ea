"""The emulator's AMQP 1.0 server: a proton handler (``handler``) with its request nodes (``nodes``:
`$cbs`, `$management`) and its message transfers (``transfers``), and the roles its links play (``links``)."""

from reconciler.emulator.server.handler import LoopGuard, ServerHandler, serving_container

__all__ = ["LoopGuard", "ServerHandler", "serving_container"]
