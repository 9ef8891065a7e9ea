"""SAS tokens as the service checks them on CBS put-token (docs/protocol.md §5).

The signature is HMAC-SHA256, keyed with the UTF-8 bytes of the key *string*, over
``<url-encoded audience>\\n<expiry>``. A token grants its audience and everything below it:
``sb://ns/topic`` covers ``topic/Subscriptions/s/$management``. The host part of an audience is
not compared, so ``localhost`` and ``127.0.0.1`` tokens both work against a local emulator.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import quote_plus, unquote_plus

from reconciler.emulator.namespace import address_path
from reconciler.errors import SbrulesError

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
#: The Python SDK puts SAS tokens with type "jwt"; the service accepts a SAS token under either type.
TOKEN_TYPES = (SAS_TOKEN_TYPE, "jwt")
_PREFIX = "SharedAccessSignature "
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


def _fields(token: str) -> dict[str, str]:
    """The raw (still URL-encoded) fields of a SAS token."""
    if not token.startswith(_PREFIX):
        raise TokenRejected("not a SharedAccessSignature token")
    out: dict[str, str] = {}
    for part in token[len(_PREFIX):].split("&"):
        key, sep, value = part.partition("=")
        if not sep:
            raise TokenRejected("malformed SharedAccessSignature token")
        out[key] = value
    missing = {"sr", "sig", "se", "skn"} - set(out)
    if missing:
        raise TokenRejected(f"SharedAccessSignature token lacks {', '.join(sorted(missing))}")
    return out


def sign(audience: str, key_name: str, key: str, expiry: int) -> str:
    """A SAS token in the SDKs' form (used by tests and tools that need a token for the emulator)."""
    encoded = quote_plus(audience)
    digest = hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = quote_plus(base64.b64encode(digest).decode())
    return f"{_PREFIX}sr={encoded}&sig={signature}&se={expiry}&skn={quote_plus(key_name)}"


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
        if not token.startswith(_PREFIX):
            raise TokenRejected("only SharedAccessSignature tokens are accepted (Entra ID JWTs are not emulated)")
        fields = _fields(token)
        key_name = unquote_plus(fields["skn"])
        key = self._keys.get(key_name)
        if key is None:
            raise TokenRejected("unknown shared access key name")
        try:
            expiry = int(unquote_plus(fields["se"]))
        except ValueError:
            raise TokenRejected("token expiry is not a number") from None
        raw_sr = fields["sr"]
        resource = unquote_plus(raw_sr)
        given = unquote_plus(fields["sig"]).encode()
        candidates = {raw_sr, quote_plus(resource), quote_plus(resource, safe="")}
        if not any(
            hmac.compare_digest(
                base64.b64encode(hmac.new(key.encode(), f"{c}\n{expiry}".encode(), hashlib.sha256).digest()), given
            )
            for c in candidates
        ):
            raise TokenRejected("invalid signature")
        if expiry <= (now if now is not None else time.time()):
            raise TokenRejected("token has expired")
        path = address_path(resource)
        if audience is not None:
            named = address_path(str(audience))
            if not Grant(path, float(expiry)).covers(named, now=0):
                raise TokenRejected("token audience does not cover the requested name")
            path = named
        return Grant(path, float(expiry), self._rights[key_name])
