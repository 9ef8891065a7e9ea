"""SAS tokens as the service checks them on CBS put-token (docs/protocol.md §5).

The signature (``reconciler.amqp.sas``, shared with the client) is HMAC-SHA256 over the token's
``sr`` field exactly as written and its expiry, so tokens from every SDK validate whichever URL
encoding they chose. A token grants its audience and everything below it: ``sb://ns/topic``
covers ``topic/Subscriptions/s/$management``. The host part of an audience is not compared, so
``localhost`` and ``127.0.0.1`` tokens both work against a local emulator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

from reconciler.amqp.sas import (
    JWT_TOKEN_TYPE,
    SAS_PREFIX,
    SAS_TOKEN_TYPE,
    SasTokenError,
    sas_fields,
    signature_matches,
    url_decode,
)
from reconciler.emulator.namespace import address_path
from reconciler.errors import SbrulesError

#: The Python SDK puts SAS tokens with type "jwt"; the service accepts a SAS token under either type.
TOKEN_TYPES = (SAS_TOKEN_TYPE, JWT_TOKEN_TYPE)
_REQUIRED_FIELDS = {"sr", "sig", "se", "skn"}
#: The rights a shared access key may carry; a key without a stated set has all three.
MANAGE, LISTEN, SEND = "Manage", "Listen", "Send"
ALL_RIGHTS = frozenset({MANAGE, LISTEN, SEND})


class TokenRejected(SbrulesError):
    """A token the namespace refuses (401); the message never contains the token or a key."""


@dataclass(frozen=True)
class Grant:
    """What a valid token allows: an audience path (prefix) until an expiry (unix seconds)."""

    path: str
    expires: float
    #: The rights of the key that signed the token (the management REST API wants Manage).
    rights: frozenset[str] = ALL_RIGHTS

    def covers(self, node_path: str, now: float | None = None) -> bool:
        if (now if now is not None else time.time()) >= self.expires:
            return False
        granted = path_parts(self.path)
        return path_parts(node_path)[: len(granted)] == granted


def path_parts(path: str) -> tuple[str, ...]:
    """An entity path compared case-insensitively, segment by segment."""
    return tuple(p.lower() for p in path.split("/") if p)


class TokenValidator:
    """Checks SAS tokens against the namespace's shared access keys (name → key), each with its rights."""

    def __init__(self, keys: Mapping[str, str], rights: Mapping[str, frozenset[str]] | None = None) -> None:
        self._keys = dict(keys)
        self._rights = {name: frozenset((rights or {}).get(name, ALL_RIGHTS)) for name in self._keys}

    def __repr__(self) -> str:
        return f"TokenValidator(key_names={sorted(self._keys)!r})"

    def validate(self, token: object, token_type: object, audience: object, now: float | None = None) -> Grant:
        """The grant a put-token establishes, or TokenRejected with the reason."""
        if str(token_type) not in TOKEN_TYPES:
            raise TokenRejected(f"unsupported token type {token_type!r}")
        if not isinstance(token, str):
            raise TokenRejected("the put-token body must be the token string")
        if not token.startswith(SAS_PREFIX):
            raise TokenRejected("only SharedAccessSignature tokens are accepted (Entra ID JWTs are not emulated)")
        try:
            fields = sas_fields(token)
        except SasTokenError as exc:
            raise TokenRejected(str(exc)) from None
        missing = _REQUIRED_FIELDS - set(fields)
        if missing:
            raise TokenRejected(f"SharedAccessSignature token lacks {', '.join(sorted(missing))}")
        key_name = url_decode(fields["skn"])
        key = self._keys.get(key_name)
        if key is None:
            raise TokenRejected("unknown shared access key name")
        try:
            expiry = int(url_decode(fields["se"]))
        except ValueError:
            raise TokenRejected("token expiry is not a number") from None
        if not signature_matches(fields, key):
            raise TokenRejected("invalid signature")
        if expiry <= (now if now is not None else time.time()):
            raise TokenRejected("token has expired")
        path = address_path(url_decode(fields["sr"]))
        if audience is not None:
            named = address_path(str(audience))
            if not Grant(path, float(expiry)).covers(named, now=0):
                raise TokenRejected("token audience does not cover the requested name")
            path = named
        return Grant(path, float(expiry), self._rights[key_name])
