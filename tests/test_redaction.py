"""redaction: skipping a pattern whose words a text lacks never changes what is redacted."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.redaction import _SECRET_PATTERNS, REDACTED, redact

pytestmark = pytest.mark.unit

#: Pieces the patterns look for, in several cases, and the text around them.
_PIECES = [
    "SharedAccessKey", "sharedaccesskey", "SIG", "sig", "=", ":", "//", "://", "@", "eyJ", "EYJ", "abcdefgh", ".",
    "Bearer ", "BEARER ", "Password", "passwd", "PWD", "Token", "access_token", "Secret", "client_secret", "API_KEY",
    "api-key", "apikey", "amqps", " ", ";", "&", "'", "\"", "x", "é", "ſ", "ı",
]


def _every_pattern(text: str) -> str:
    """What redaction was before the words: every pattern searched."""
    for pattern, _words in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED + ("@" if m.group(0).endswith("@") else ""), text)
    return text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=24).map("".join))
def test_redaction_with_the_words_is_redaction_with_every_pattern(text):
    assert redact(text) == _every_pattern(text)


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("ſecret=hunter2", "ſecret=<redacted>"),  # the regular expression matches "ſ" as "s"; lower() does not
        ("ſig=abc", "ſig=<redacted>"),
        ("Endpoint=sb://x/;SharedAcceſsKey=abc", "Endpoint=sb://x/;SharedAcceſsKey=<redacted>"),
        ("PASSWORD: hunter2", "PASSWORD: <redacted>"),
        ("amqps://user:pw@host", "amqps://<redacted>@host"),
    ],
)
def test_mixed_case_and_non_ascii_spellings_are_still_redacted(text, redacted):
    assert redact(text) == redacted
