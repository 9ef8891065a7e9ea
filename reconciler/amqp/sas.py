"""Tokens for CBS ``put-token``: SAS tokens from a key, a given SAS, or an Entra ID JWT.

SAS (docs/protocol.md §5, NET2 ``SharedAccessSignature.BuildSignature``): HMAC-SHA256 keyed with
the UTF-8 bytes of the key *string*, over ``urlencode(audience) + "\\n" + expiry``; fields in the
order sr, sig, se, skn. Token values are wrapped so that they never print.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable, Protocol

from reconciler.amqp.connection import ConnectionString
from reconciler.errors import SbrulesError

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
#: Token lifetime for generated SAS tokens (NET2 default: 30 minutes).
SAS_VALIDITY_SECONDS = 30 * 60
ENTRA_SCOPE = "https://servicebus.azure.net/.default"

#: Characters WebUtility.UrlEncode leaves as they are (space becomes '+').
_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!*()")


class AuthConfigError(SbrulesError):
    """No usable credentials for the requested authentication."""


def url_encode(text: str) -> str:
    """.NET ``WebUtility.UrlEncode``: UTF-8, unreserved kept, space → '+', others %XX upper-case."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in _UNRESERVED:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def sas_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """``SharedAccessSignature sr=…&sig=…&se=…&skn=…`` for ``audience``, valid until unix ``expiry``."""
    encoded_audience = url_encode(audience)
    expiry_text = str(int(expiry))
    digest = hmac.new(key.encode("utf-8"), f"{encoded_audience}\n{expiry_text}".encode("utf-8"), hashlib.sha256)
    signature = base64.b64encode(digest.digest()).decode("ascii")
    return (
        f"SharedAccessSignature sr={encoded_audience}&sig={url_encode(signature)}"
        f"&se={url_encode(expiry_text)}&skn={url_encode(key_name)}"
    )


@dataclass(frozen=True)
class Token:
    """A token to put on ``$cbs``; ``value`` is secret and excluded from repr."""

    value: str = field(repr=False)
    token_type: str
    expires_at: float  # unix seconds

    def __str__(self) -> str:
        return f"<{self.token_type} token expiring at {int(self.expires_at)}>"


class TokenProvider(Protocol):
    def get_token(self, audience: str) -> Token: ...


class SasKeyTokenProvider:
    """Signs a fresh SAS token per audience from a key name and key."""

    def __init__(self, key_name: str, key: str, validity: int = SAS_VALIDITY_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._key_name = key_name
        self._key = key
        self._validity = validity
        self._clock = clock

    def get_token(self, audience: str) -> Token:
        expiry = int(self._clock()) + self._validity
        return Token(sas_token(audience, self._key_name, self._key, expiry), SAS_TOKEN_TYPE, expiry)

    def __repr__(self) -> str:
        return f"SasKeyTokenProvider(key_name={self._key_name!r}, key=***)"


class SharedSignatureTokenProvider:
    """A SAS given in the connection string: used as is for every audience until it expires."""

    def __init__(self, signature: str) -> None:
        self._signature = signature
        fields = urllib.parse.parse_qs(signature.removeprefix("SharedAccessSignature ").strip())
        try:
            self._expiry = float(fields["se"][0])
        except (KeyError, ValueError, IndexError):
            raise AuthConfigError("SharedAccessSignature has no valid 'se' (expiry) field") from None

    def get_token(self, audience: str) -> Token:
        return Token(self._signature, SAS_TOKEN_TYPE, self._expiry)

    def __repr__(self) -> str:
        return "SharedSignatureTokenProvider(signature=***)"


class EntraTokenProvider:
    """Entra ID (Azure AD) JWTs from ``azure-identity`` (optional extra ``sbrules[entra]``)."""

    def __init__(self, credential: object | None = None) -> None:
        if credential is None:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError:
                raise AuthConfigError(
                    "--auth entra needs azure-identity: pip install 'sbrules[entra]'"
                ) from None
            credential = DefaultAzureCredential()
        self._credential = credential
        self._lock = threading.Lock()

    def get_token(self, audience: str) -> Token:
        with self._lock:
            access = self._credential.get_token(ENTRA_SCOPE)  # type: ignore[attr-defined]
        return Token(access.token, JWT_TOKEN_TYPE, float(access.expires_on))

    def __repr__(self) -> str:
        return "EntraTokenProvider()"


def token_provider_for(conn: ConnectionString, auth: str = "sas") -> TokenProvider:
    """The provider for ``auth`` ('sas' or 'entra') given the connection string's credentials."""
    if auth == "entra":
        return EntraTokenProvider()
    if auth != "sas":
        raise AuthConfigError(f"unknown authentication {auth!r} (use sas or entra)")
    if conn.key_name and conn.key:
        return SasKeyTokenProvider(conn.key_name, conn.key)
    if conn.signature:
        return SharedSignatureTokenProvider(conn.signature)
    raise AuthConfigError(
        "the connection string has no SharedAccessKeyName/SharedAccessKey or SharedAccessSignature "
        "(or use --auth entra)"
    )
