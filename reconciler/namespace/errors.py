"""Errors of the `$management` client, mapped from response status and error condition.

The mapping follows the SDKs (docs/protocol.md §4): the condition decides when present, the
status code otherwise. ``transient`` says whether a retry may succeed (busy, timeout, internal,
dropped connection); everything else surfaces at once.
"""

from __future__ import annotations

from typing import Any, Iterable

from reconciler.errors import ErrorCode, SbrulesError
from reconciler.namespace.credits import wait_hint


class ManagementError(SbrulesError):
    """A failed management operation: status code, AMQP error condition and service description."""

    code = ErrorCode.SERVICE

    transient = False
    #: The failure is the namespace's or the connection's, not one entity's (unreachable, token
    #: refused): a command reports it once instead of once per subscription.
    namespace_wide = False
    #: Set by the client when this error came from a retry of the same call (an earlier attempt
    #: may have taken effect before its connection dropped).
    after_retry = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        condition: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.condition = condition
        self.description = description


class NotFoundError(ManagementError):
    """The entity, rule, message or session does not exist (404)."""

    code = ErrorCode.NOT_FOUND


class AlreadyExistsError(ManagementError):
    """A rule of that name already exists (409)."""


class UnauthorizedError(ManagementError):
    """The token was refused or lacks the right claims (401)."""

    code = ErrorCode.AUTH


class BadRequestError(ManagementError):
    """The service rejected the request's arguments (400)."""


class NotSupportedError(ManagementError):
    """The service does not implement the operation (501)."""


class LockLostError(ManagementError):
    """A message or session lock expired or was stolen (410)."""


class QuotaExceededError(ManagementError):
    """A namespace or entity quota would be exceeded (403)."""


class ServerBusyError(ManagementError):
    """The service is throttling (503); retried after its wait hint ("Please wait 2 seconds"), or
    with backoff when it gives none."""

    transient = True

    def __init__(self, message: str, *, retry_after: float | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after if retry_after is not None else wait_hint(self.description)


class OperationTimeoutError(ManagementError):
    """The service or the client gave up waiting (408 or no response in time)."""

    code = ErrorCode.CONNECTION

    transient = True


class InternalError(ManagementError):
    """An unexpected service failure (500 or an unknown status); retried."""

    transient = True


class ConnectionLostError(ManagementError):
    """The AMQP connection or link dropped before a response arrived; retried after reconnecting."""

    code = ErrorCode.CONNECTION

    transient = True


class NotSentError(ManagementError):
    """The caller's send guard (``pipeline.send_guard``) stopped an attempt before it went out:
    nothing was sent, so nothing took effect."""


class AuthenticationError(UnauthorizedError):
    """The token was refused (CBS put-token, or the management API), or none could be had."""

    namespace_wide = True


class TokenExpiredError(AuthenticationError):
    """The SharedAccessSignature given in the connection string has expired."""


#: Error condition → status code (NET2 AmqpExceptionHelper / JSCORE ConditionStatusMapper).
CONDITION_STATUS = {
    "com.microsoft:timeout": 408,
    "amqp:not-found": 404,
    "amqp:not-implemented": 501,
    "com.microsoft:entity-already-exists": 409,
    "com.microsoft:message-lock-lost": 410,
    "com.microsoft:session-lock-lost": 410,
    "com.microsoft:store-lock-lost": 410,
    "com.microsoft:session-cannot-be-locked": 410,
    "com.microsoft:partition-not-owned": 410,
    "amqp:link:stolen": 410,
    "amqp:resource-limit-exceeded": 403,
    "amqp:link:message-size-exceeded": 403,
    "com.microsoft:no-matching-subscription": 500,
    "amqp:not-allowed": 400,
    "com.microsoft:argument-error": 400,
    "com.microsoft:argument-out-of-range": 400,
    "com.microsoft:entity-disabled": 400,
    "amqp:unauthorized-access": 401,
    "com.microsoft:publisher-revoked": 401,
    "com.microsoft:auth-failed": 401,
    "com.microsoft:server-busy": 503,
    "com.microsoft:message-not-found": 404,
    "com.microsoft:session-not-found": 404,
}

_STATUS_CLASS: dict[int, type[ManagementError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: QuotaExceededError,
    404: NotFoundError,
    408: OperationTimeoutError,
    409: AlreadyExistsError,
    410: LockLostError,
    500: InternalError,
    501: NotSupportedError,
    503: ServerBusyError,
}


def error_for(
    status: int | None, condition: str | None, description: str | None, context: str
) -> ManagementError:
    """The exception for a non-success response; ``context`` names the operation and entity."""
    condition = str(condition) if condition is not None else None
    effective = CONDITION_STATUS.get((condition or "").lower())
    if effective is None:
        effective = status
    cls = _STATUS_CLASS.get(effective or 0, InternalError)
    detail = description or "no description"
    codes = ", ".join(str(x) for x in (status, condition) if x is not None) or "no status"
    return cls(f"{context}: {detail} ({codes})", status=status, condition=condition, description=description)


def response_status(properties: dict[str, Any] | None) -> tuple[int | None, str | None, str | None]:
    """(status, description, condition) from response application-properties, either spelling."""
    props = {str(k): v for k, v in (properties or {}).items()}

    def first(*names: str) -> Any:
        for name in names:
            if props.get(name) is not None:
                return props[name]
        return None

    raw_status = first("statusCode", "status-code")
    try:
        status = int(raw_status) if raw_status is not None else None
    except (TypeError, ValueError):
        status = None
    description = first("statusDescription", "status-description")
    condition = first("errorCondition", "error-condition")
    return (
        status,
        str(description) if description is not None else None,
        str(condition) if condition is not None else None,
    )


class ConnectFailed(ManagementError):
    """The namespace could not be reached, or would not open a connection: never retried (another
    try would fail the same way), reported once per command. See ``reconciler.namespace.reach``."""

    code = ErrorCode.CONNECTION

    namespace_wide = True


class HostNotFoundError(ConnectFailed):
    """The endpoint's host name does not resolve."""


class EndpointRefusedError(ConnectFailed):
    """Nothing listens on the endpoint's port (connection refused)."""


class NotServiceBusError(ConnectFailed):
    """Something answered, but not as Service Bus does: not the AMQP protocol header (or not the
    management API's XML), or the socket closed before any answer."""


class OpenTimeoutError(ConnectFailed):
    """The peer accepted the connection but did not open AMQP (or answer HTTP) in time."""


class TransportSecurityError(ConnectFailed):
    """TLS failed (untrusted certificate, host name mismatch): never retried, never downgraded."""


class ClientClosedError(ManagementError):
    """The client was closed (or its event loop stopped) while a request was waiting."""

    code = ErrorCode.CONNECTION


def outcome_unknown(exc: Exception) -> bool:
    """Whether a failed request may still have taken effect: its answer never came (connection
    lost, no response in time, the service's internal error, the client closed), or that of an
    earlier attempt of the same call did not. Only reading the entity again tells."""
    if isinstance(exc, ClientClosedError):
        return True
    return isinstance(exc, ManagementError) and (exc.transient or exc.after_retry)


def namespace_failure(results: Iterable[object]) -> ManagementError | None:
    """The first failure among ``results`` that is the namespace's rather than one entity's
    (unreachable, token refused): the one error a command reports instead of one per subscription."""
    for result in results:
        if isinstance(result, ManagementError) and result.namespace_wide:
            return result
    return None
