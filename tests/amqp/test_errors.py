"""What a failed response makes the client do: the error its caller catches, and whether it retries.

A scripted peer answers every request with the status and condition under test; the client is
configured to retry twice, so a transient failure is sent three times and anything else once.
Responses are classified by their condition when there is one, by status otherwise
(docs/protocol.md §4).
"""

from __future__ import annotations

from typing import Any

import proton
import pytest
from proton import symbol

from reconciler.amqp.client import ManagementClient
from reconciler.errors import SbrulesError
from reconciler.namespace import errors as e
from reconciler.namespace.retry import RetryPolicy

from .wire_server import WireServer

RETRIES = 2


@pytest.fixture(scope="module")
def peer():
    """One scripted peer and client for the module; ``answer`` holds the response properties."""
    answer: dict[str, Any] = {}
    with WireServer(respond=lambda address, msg: (answer, None)) as server:
        policy = RetryPolicy(retries=RETRIES, throttled_retries=RETRIES, backoff=0.001)
        with ManagementClient(server.connection_string(), timeout=5, retry=policy) as client:
            yield server, client, answer


@pytest.mark.parametrize(
    "status, condition, cls, retried",
    [
        (404, None, e.NotFoundError, False),
        (None, "amqp:not-found", e.NotFoundError, False),
        (404, "com.microsoft:message-not-found", e.NotFoundError, False),
        (409, None, e.AlreadyExistsError, False),
        (500, "com.microsoft:entity-already-exists", e.AlreadyExistsError, False),  # the condition decides
        (401, None, e.UnauthorizedError, False),
        (None, "amqp:unauthorized-access", e.UnauthorizedError, False),
        (None, "com.microsoft:auth-failed", e.UnauthorizedError, False),
        (400, None, e.BadRequestError, False),
        (None, "com.microsoft:argument-error", e.BadRequestError, False),
        (None, "com.microsoft:argument-out-of-range", e.BadRequestError, False),
        (None, "amqp:not-allowed", e.BadRequestError, False),
        (None, "com.microsoft:entity-disabled", e.BadRequestError, False),
        (503, None, e.ServerBusyError, True),
        (None, "com.microsoft:server-busy", e.ServerBusyError, True),
        (408, None, e.OperationTimeoutError, True),
        (None, "com.microsoft:timeout", e.OperationTimeoutError, True),
        (403, None, e.QuotaExceededError, False),
        (None, "amqp:resource-limit-exceeded", e.QuotaExceededError, False),
        (None, "amqp:link:message-size-exceeded", e.QuotaExceededError, False),
        (500, None, e.InternalError, True),
        (None, "amqp:internal-error", e.InternalError, True),  # a condition outside the table: no status
        (599, None, e.InternalError, True),  # a status outside the table
        (None, None, e.InternalError, True),  # no status at all
        (410, None, e.LockLostError, False),
        (None, "com.microsoft:message-lock-lost", e.LockLostError, False),
        (None, "com.microsoft:session-lock-lost", e.LockLostError, False),
        (501, None, e.NotSupportedError, False),
        (None, "com.microsoft:no-matching-subscription", e.InternalError, True),
        (None, "COM.MICROSOFT:SERVER-BUSY", e.ServerBusyError, True),  # conditions compare case-insensitively
    ],
)
def test_a_failed_response_reaches_the_caller_as_its_error_retried_only_when_transient(
    peer, status, condition, cls, retried
):
    server, client, answer = peer
    answer.clear()
    answer["statusDescription"] = "the description"
    if status is not None:
        answer["statusCode"] = proton.int32(status)
    if condition is not None:
        answer["errorCondition"] = symbol(condition)
    sent_before = len(server.requests)
    with pytest.raises(SbrulesError) as info:
        client.remove_rule("t", "s", "r")
    err = info.value
    assert type(err) is cls
    assert len(server.requests) - sent_before == (1 + RETRIES if retried else 1)
    assert (err.status, err.condition, err.description) == (status, condition, "the description")
    assert str(err).startswith("remove-rule on t/Subscriptions/s: the description")


def test_a_refused_token_is_an_unauthorized_error_and_is_not_retried():
    with WireServer(cbs_status=401) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=3, backoff=0.001) as client:
            with pytest.raises(e.UnauthorizedError) as info:
                client.list_rules("t", "s")
    assert isinstance(info.value, e.AuthenticationError) and "refused the token" in str(info.value)
    assert len(server.cbs_requests) == 1 and not server.requests


@pytest.mark.unit
@pytest.mark.parametrize(
    "props, expected",
    [
        ({"statusCode": 200, "statusDescription": "OK"}, (200, "OK", None)),
        ({"status-code": 202, "status-description": "Accepted"}, (202, "Accepted", None)),
        ({symbol("statusCode"): 404, "errorCondition": symbol("amqp:not-found")}, (404, None, "amqp:not-found")),
        ({"status-code": 503, "error-condition": "com.microsoft:server-busy"}, (503, None, "com.microsoft:server-busy")),
        ({"statusCode": "oops"}, (None, None, None)),
        (None, (None, None, None)),
    ],
)
def test_response_status_reads_both_spellings(props, expected):
    assert e.response_status(props) == expected
