"""SAS tokens as the service checks them on CBS put-token (docs/protocol.md §5), and Entra ID
tokens signed with a development key.

The signature (``reconciler.namespace.credentials``, shared with the client) is HMAC-SHA256 over the token's
``sr`` field exactly as written and its expiry, so tokens from every SDK validate whichever URL
encoding they chose. A token grants its audience and everything below it: ``sb://ns/topic``
covers ``topic/Subscriptions/s/$management``. The host part of an audience is not compared, so
``localhost`` and ``127.0.0.1`` tokens both work against a local emulator.

Entra ID tokens are accepted only when the emulator is given a development signing key (never by
default): a JWT of type ``jwt`` signed HS256 with that key, whose ``aud`` is Service Bus's and whose
``exp`` is in the future, grants every right on the whole namespace (the service would look up the
identity's Azure Service Bus Data role instead; the emulator has no directory to look in).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

from reconciler.emulator.namespace import address_path
from reconciler.errors import SbrulesError
from reconciler.extras import require
from reconciler.names import name_key
from reconciler.namespace.credentials import (
    ENTRA_AUDIENCE,
    JWT_TOKEN_TYPE,
    SAS_PREFIX,
    SAS_TOKEN_TYPE,
    SasTokenError,
    sas_fields,
    signature_matches,
    url_decode,
)

#: The Python SDK puts SAS tokens with type "jwt"; the service accepts a SAS token under either type.
TOKEN_TYPES = (SAS_TOKEN_TYPE, JWT_TOKEN_TYPE)
_REQUIRED_FIELDS = {"sr", "sig", "se", "skn"}
#: The rights a shared access key may carry; a key without a stated set has all three.
MANAGE, LISTEN, SEND = "Manage", "Listen", "Send"
ALL_RIGHTS = frozenset({MANAGE, LISTEN, SEND})
#: The shortest development signing key accepted: HS256 wants at least 32 bytes (RFC 7518 §3.2).
ENTRA_KEY_MIN_BYTES = 32


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
    return tuple(name_key(p) for p in path.split("/") if p)


class TokenValidator:
    """Checks SAS tokens against the namespace's shared access keys (name → key), each with its
    rights, and, given ``entra_key``, Entra ID tokens signed with that development key."""

    def __init__(
        self,
        keys: Mapping[str, str],
        rights: Mapping[str, frozenset[str]] | None = None,
        entra_key: str | None = None,
    ) -> None:
        self._keys = dict(keys)
        self._rights = {name: frozenset((rights or {}).get(name, ALL_RIGHTS)) for name in self._keys}
        if entra_key is not None and len(entra_key.encode("utf-8")) < ENTRA_KEY_MIN_BYTES:
            raise ValueError(f"the development Entra ID signing key must be at least {ENTRA_KEY_MIN_BYTES} bytes")
        self._entra_key = entra_key

    def __repr__(self) -> str:
        entra = ", entra=development key" if self._entra_key is not None else ""
        return f"TokenValidator(key_names={sorted(self._keys)!r}{entra})"

    def _entra_grant(self, token: str, audience: object, now: float) -> Grant:
        """The grant of an Entra ID token signed with the development key (every right)."""
        assert self._entra_key is not None
        jwt = require("jwt", "emulator", "the emulator's development Entra ID tokens")
        try:
            claims = jwt.decode(
                token,
                self._entra_key,
                algorithms=["HS256"],
                audience=[ENTRA_AUDIENCE, ENTRA_AUDIENCE + "/"],
                options={"verify_exp": False, "require": ["exp", "aud"]},  # exp against the emulator's clock
            )
        except jwt.InvalidTokenError as exc:
            raise TokenRejected(f"Entra ID token refused: {exc}") from None
        if not isinstance(claims["exp"], (int, float)):
            raise TokenRejected("Entra ID token refused: exp is not a number")
        if claims["exp"] <= now:
            raise TokenRejected("token has expired")
        return Grant(address_path(str(audience)) if audience is not None else "", float(claims["exp"]), ALL_RIGHTS)

    def validate(self, token: object, token_type: object, audience: object, now: float | None = None) -> Grant:
        """The grant a put-token establishes, or TokenRejected with the reason."""
        if str(token_type) not in TOKEN_TYPES:
            raise TokenRejected(f"unsupported token type {token_type!r}")
        if not isinstance(token, str):
            raise TokenRejected("the put-token body must be the token string")
        if not token.startswith(SAS_PREFIX):
            if str(token_type) == JWT_TOKEN_TYPE and self._entra_key is not None:
                return self._entra_grant(token, audience, now if now is not None else time.time())
            raise TokenRejected(
                "only SharedAccessSignature tokens are accepted (start the emulator with a development "
                "Entra ID signing key to accept Entra ID tokens)"
            )
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
