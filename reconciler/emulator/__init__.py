"""A local Service Bus namespace over real AMQP 1.0 (python-qpid-proton), for tests and demos."""

from reconciler.emulator.emulator import DEV_KEY, DEV_KEY_NAME, Emulator, EmulatorError
from reconciler.emulator.faults import Faults, FaultsFileError
from reconciler.emulator.namespace import Namespace, OperationError

__all__ = [
    "DEV_KEY",
    "DEV_KEY_NAME",
    "Emulator",
    "EmulatorError",
    "Faults",
    "FaultsFileError",
    "Namespace",
    "OperationError",
]
