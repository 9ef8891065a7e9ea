"""Optional dependencies, imported where a feature needs them, with one message when an extra is missing.

``pip install sbrules`` brings what the offline commands and the AMQP client use. The rest comes with
an extra: ``spark`` (the traffic report), ``entra`` (Entra ID sign-in), ``emulator`` (the emulator's
HTTPS certificate and development Entra ID tokens). Only the module named is looked for: a module
that is installed but fails to import is a broken install, and its own error is shown.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from reconciler.errors import SbrulesError


class MissingExtra(SbrulesError):
    """A feature needs an optional dependency that is not installed."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """``import module``, or a :class:`MissingExtra` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (module == missing or module.startswith(missing + ".")):
            raise
        raise MissingExtra(f"{feature} needs {missing}: pip install 'sbrules[{extra}]'") from None
