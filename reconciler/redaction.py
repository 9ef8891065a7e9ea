"""What text must never carry out of the process: known secret values and anything shaped like a
key, a signature, a token, a password or a URL's credentials, replaced by ``<redacted>``.

Every line the CLI prints passes through :func:`redact`, and so does anything sbrules writes where
others can read it (the holder named in a subscription's lock).
"""

from __future__ import annotations

import re
from typing import Iterable

REDACTED = "<redacted>"

_SECRET_PATTERNS = (
    # SharedAccessKey=…; in a connection string (the key name is not secret).
    re.compile(r"(?i)(SharedAccessKey\s*=\s*)[^;\s\"']+"),
    # The signature of a SAS token, whether in a connection string or a token.
    re.compile(r"(?i)(\bsig=)[^&;\s\"']+"),
    # Entra ID access tokens (JWTs) and bearer tokens.
    re.compile(r"()\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*"),
    re.compile(r"(?i)(\bBearer\s+)[A-Za-z0-9._~+/=-]+"),
    # The credentials of a URL (scheme://user:password@host): the user as well as the password.
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/@\s\"'<>\[\]]+@"),
    # password=…, token=…, secret=…, api_key=… (query strings, settings, command lines).
    re.compile(r"(?i)(\b(?:password|passwd|pwd|token|access_token|secret|client_secret|api[_-]?key)\s*[=:]\s*)[^&;,\s\"']+"),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and anything shaped like a key, signature or token
    replaced by ``<redacted>``."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED + ("@" if m.group(0).endswith("@") else ""), text)
    return text
