"""SAS token signing (shared with the emulator) and the token providers for CBS ``put-token``:
SAS tokens from a key, a given SAS, or an Entra ID JWT.

SAS (docs/protocol.md §5, as the .NET SDK's ``SharedAccessSignature.BuildSignature``): HMAC-SHA256
keyed with the UTF-8 bytes of the key *string*, over ``url_encode(audience) + "\\n" + expiry``;
fields in the order sr, sig, se, skn. The signature covers ``sr`` exactly as the token writes it,
which is how a token is checked (``signature_matches``) whatever URL encoding its issuer used.
Token values are wrapped so that they never print.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.extras import require
from reconciler.namespace.connection import ConnectionString
from reconciler.namespace.errors import AuthenticationError, TokenExpiredError

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
SAS_PREFIX = "SharedAccessSignature "
#: Token lifetime for generated SAS tokens (the .NET SDK's default: 30 minutes).
SAS_VALIDITY_SECONDS = 30 * 60
ENTRA_SCOPE = "https://servicebus.azure.net/.default"
#: The audience (``aud``) of the Entra ID tokens that scope yields.
ENTRA_AUDIENCE = "https://servicebus.azure.net"

#: Characters WebUtility.UrlEncode leaves as they are (space becomes '+').
_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!*()")


class AuthConfigError(SbrulesError):
    """No usable credentials for the requested authentication."""

    code = ErrorCode.AUTH


class SasTokenError(SbrulesError):
    """A SAS token that is not well formed (the message never contains the token)."""

    code = ErrorCode.AUTH


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


def url_decode(text: str) -> str:
    """``WebUtility.UrlDecode``, which reads any encoder's output: '+' → space, %xx in either case."""
    return urllib.parse.unquote_plus(text)


def _signature(key: str, encoded_audience: str, expiry: str) -> str:
    digest = hmac.new(key.encode("utf-8"), f"{encoded_audience}\n{expiry}".encode("utf-8"), hashlib.sha256)
    return base64.b64encode(digest.digest()).decode("ascii")


def sas_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """``SharedAccessSignature sr=…&sig=…&se=…&skn=…`` for ``audience``, valid until unix ``expiry``."""
    encoded_audience = url_encode(audience)
    expiry_text = str(int(expiry))
    signature = _signature(key, encoded_audience, expiry_text)
    return (
        f"{SAS_PREFIX}sr={encoded_audience}&sig={url_encode(signature)}"
        f"&se={url_encode(expiry_text)}&skn={url_encode(key_name)}"
    )


def sas_fields(token: str) -> dict[str, str]:
    """The fields of a SAS token as written (still URL-encoded)."""
    if not token.startswith(SAS_PREFIX):
        raise SasTokenError("not a SharedAccessSignature token")
    fields: dict[str, str] = {}
    for part in token[len(SAS_PREFIX):].strip().split("&"):
        name, sep, value = part.partition("=")
        if not sep:
            raise SasTokenError("malformed SharedAccessSignature token")
        fields[name] = value
    return fields


def signature_matches(fields: dict[str, str], key: str) -> bool:
    """Whether ``key`` signed a token with these fields: the HMAC over ``sr`` as written and the expiry."""
    expected = _signature(key, fields["sr"], url_decode(fields["se"]))
    return hmac.compare_digest(expected.encode("ascii"), url_decode(fields["sig"]).encode("utf-8"))


@dataclass(frozen=True)
class Token:
    """A token to put on ``$cbs``; ``value`` is secret and excluded from repr."""

    value: str = field(repr=False)
    token_type: str
    expires_at: float  # unix seconds

    def __str__(self) -> str:
        return f"<{self.token_type} token expiring at {int(self.expires_at)}>"


#: A token is renewed this long before it expires (NET2: ten minutes), or once two thirds of its
#: life are over when it lives shorter than three times that: for CBS and REST alike.
TOKEN_REFRESH_MARGIN = 600.0


def renewal_due(issued_at: float, expires_at: float, margin: float = TOKEN_REFRESH_MARGIN) -> float:
    """When a token obtained at ``issued_at`` that expires at ``expires_at`` is renewed (unix seconds)."""
    return expires_at - min(margin, (expires_at - issued_at) / 3)


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
    """A SAS given in the connection string: used as is for every audience until it expires.

    An expired signature is refused here, before any connection, with when it expired: the
    service would only answer 401 for each entity.
    """

    def __init__(self, signature: str, clock: Callable[[], float] = time.time) -> None:
        self._signature = signature
        self._clock = clock
        try:
            fields = sas_fields(signature)
        except SasTokenError as exc:
            raise AuthConfigError(f"the connection string's SharedAccessSignature: {exc}") from None
        try:
            self._expiry = float(url_decode(fields["se"]))
        except (KeyError, ValueError):
            raise AuthConfigError("SharedAccessSignature has no valid 'se' (expiry) field") from None
        self._check_expiry()

    def _check_expiry(self) -> None:
        now = self._clock()
        if self._expiry <= now:
            when = _dt.datetime.fromtimestamp(self._expiry, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            raise TokenExpiredError(
                f"the SharedAccessSignature in the connection string expired at {when} ({_ago(now - self._expiry)} "
                "ago): get a new signature, or use SharedAccessKeyName/SharedAccessKey"
            )

    def get_token(self, audience: str) -> Token:
        self._check_expiry()
        return Token(self._signature, SAS_TOKEN_TYPE, self._expiry)

    def __repr__(self) -> str:
        return "SharedSignatureTokenProvider(signature=***)"


def _ago(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count > 1 else ''}"
    return f"{int(seconds)} seconds"


class EntraCredential(Protocol):
    """What the provider uses of an ``azure-identity`` credential (``azure.core``'s TokenCredential,
    which is not a dependency unless the ``entra`` extra is installed)."""

    def get_token(self, *scopes: str) -> Any: ...


def default_credential() -> EntraCredential:
    """azure-identity's DefaultAzureCredential; any other EntraCredential serves as well."""
    identity = require("azure.identity", "entra", "--auth entra")
    credential: EntraCredential = identity.DefaultAzureCredential()
    return credential


class EntraTokenProvider:
    """Entra ID (Azure AD) JWTs from ``azure-identity`` (optional extra ``sbrules[entra]``)."""

    def __init__(self, credential: EntraCredential | None = None) -> None:
        self._credential = credential if credential is not None else default_credential()
        self._lock = threading.Lock()

    def get_token(self, audience: str) -> Token:
        """A JWT for Service Bus; AuthenticationError naming the credential's reason when none can be had."""
        try:
            with self._lock:
                access = self._credential.get_token(ENTRA_SCOPE)
        except Exception as exc:  # azure-identity's errors have no common base worth naming
            reason = (str(exc).strip().splitlines() or [""])[0]
            raise AuthenticationError(
                f"Entra ID: could not get a token for Service Bus: {type(exc).__name__}"
                f"{': ' + reason if reason else ''} (sign in with `az login`, or set AZURE_CLIENT_ID/"
                "AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
            ) from exc
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
