"""Every response status / error condition maps to the right error class and transient flag."""

from __future__ import annotations

import pytest
from proton import symbol

from reconciler.amqp import errors as e
from reconciler.errors import SbrulesError


@pytest.mark.parametrize(
    "status, condition, cls, transient",
    [
        (404, None, e.NotFoundError, False),
        (None, "amqp:not-found", e.NotFoundError, False),
        (404, "com.microsoft:message-not-found", e.NotFoundError, False),
        (409, None, e.AlreadyExistsError, False),
        (500, "com.microsoft:entity-already-exists", e.AlreadyExistsError, False),
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
        (None, "amqp:internal-error", e.InternalError, True),
        (599, None, e.InternalError, True),
        (None, None, e.InternalError, True),
        (410, None, e.LockLostError, False),
        (None, "com.microsoft:message-lock-lost", e.LockLostError, False),
        (None, "com.microsoft:session-lock-lost", e.LockLostError, False),
        (501, None, e.NotSupportedError, False),
        (None, "com.microsoft:no-matching-subscription", e.InternalError, True),
        (None, "COM.MICROSOFT:SERVER-BUSY", e.ServerBusyError, True),
    ],
)
def test_error_mapping(status, condition, cls, transient):
    err = e.error_for(status, condition, "the description", "add-rule on t/Subscriptions/s")
    assert type(err) is cls
    assert err.transient is transient
    assert isinstance(err, SbrulesError) and isinstance(err, e.ManagementError)
    assert (err.status, err.condition, err.description) == (status, condition, "the description")
    assert str(err).startswith("add-rule on t/Subscriptions/s: the description")


def test_connection_lost_is_transient_and_auth_error_is_unauthorized():
    assert e.ConnectionLostError("x").transient
    assert issubclass(e.AuthenticationError, e.UnauthorizedError) and not e.AuthenticationError("x").transient


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
