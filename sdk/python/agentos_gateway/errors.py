"""The errors of the SDK: the gateway's RFC 9457 problems, and the ends of streams."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any, cast

import httpx

from .schema import ErrorCode

__all__ = [
    "AgentosError",
    "AttachClosedError",
    "ConflictError",
    "DeadlineExceededError",
    "InvalidArgumentError",
    "NotEventStreamError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
    "StreamCutError",
    "UnauthenticatedError",
    "UnavailableError",
    "code_for_status",
]

# How much of an error body is read; a longer one is cut.
_MAX_ERROR_BODY = 64 << 10


class AgentosError(Exception):
    """An answer of the gateway outside 2xx (an RFC 9457 problem), or the final
    ``error`` event of a stream (then ``status`` is 0).

    Branch on ``code`` (or catch a subclass such as :class:`NotFoundError`),
    never on the message: the message is the gateway's own ``detail``.
    """

    status: int
    """The HTTP status, or 0 for a stream's final error event."""
    code: ErrorCode
    """The gateway's stable code; derived from the status when the body was not a problem."""
    title: str
    detail: str
    details: dict[str, Any]
    """Extra facts, for example a VM's ``state`` on conflict or the ``field`` at fault."""
    type: str
    instance: str
    request_id: str
    """The gateway's id of the request (from the problem or ``X-Request-ID``)."""
    retry_after: float | None
    """The ``Retry-After`` header in seconds, when the gateway sent one."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        detail: str = "",
        *,
        title: str = "",
        details: Mapping[str, Any] | None = None,
        type: str = "",
        instance: str = "",
        request_id: str = "",
        retry_after: float | None = None,
    ) -> None:
        text = detail or title or code
        where = f"{status} {code}" if status else code
        rid = f", request {request_id}" if request_id else ""
        super().__init__(f"{text} ({where}{rid})")
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.details = dict(details or {})
        self.type = type
        self.instance = instance
        self.request_id = request_id
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), self.status, self.code, self.detail, self.title, self.details,
             self.type, self.instance, self.request_id, self.retry_after),
        )


def _rebuild(cls: type[AgentosError], *args: Any) -> AgentosError:
    status, code, detail, title, details, typ, instance, request_id, retry_after = args
    return cls(status, code, detail, title=title, details=details, type=typ,
               instance=instance, request_id=request_id, retry_after=retry_after)


class InvalidArgumentError(AgentosError):
    """``invalid_argument`` (400): ``details["field"]`` names the field at fault."""


class UnauthenticatedError(AgentosError):
    """``unauthenticated`` (401): no credential, or one the gateway does not know."""


class PermissionDeniedError(AgentosError):
    """``permission_denied`` (403): the credential may not make the call (a token's scopes)."""


class NotFoundError(AgentosError):
    """``not_found`` (404, 410)."""


class ConflictError(AgentosError):
    """``conflict`` (409): for example a VM that ended (``details["state"]``)."""


class RateLimitedError(AgentosError):
    """``resource_exhausted`` (429): a quota or the request rate; see ``retry_after``."""


class UnavailableError(AgentosError):
    """``unavailable`` (502, 503): the gateway or the VM cannot serve the call now."""


class DeadlineExceededError(AgentosError):
    """``deadline_exceeded`` (504): an exec that ran past its timeout, a wait that ended."""


_CLASSES: dict[str, type[AgentosError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "resource_exhausted": RateLimitedError,
    "unavailable": UnavailableError,
    "deadline_exceeded": DeadlineExceededError,
}


def make_error(status: int, code: ErrorCode, detail: str = "", **kw: Any) -> AgentosError:
    """The AgentosError of code, as the subclass that stands for it."""
    return _CLASSES.get(code, AgentosError)(status, code, detail, **kw)


def code_for_status(status: int) -> ErrorCode:
    """The gateway's code for a status, for answers that carry no problem (HEAD,
    proxies, a server that is not the gateway), as the Go client's codeForStatus."""
    codes: dict[int, ErrorCode] = {
        400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
        404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 409: "conflict",
        410: "not_found", 412: "precondition_failed", 413: "payload_too_large",
        416: "range_not_satisfiable", 422: "unprocessable", 429: "resource_exhausted",
        431: "headers_too_large", 501: "not_implemented", 502: "unavailable",
        503: "unavailable", 504: "deadline_exceeded",
    }
    if status in codes:
        return codes[status]
    if 400 <= status < 500:
        return "invalid_argument"
    return "internal"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After in seconds: delay-seconds or an HTTP date."""
    if not value:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_status(
    status: int, detail: str, headers: Mapping[str, str], title: str = ""
) -> AgentosError:
    """The AgentosError of an answer that carries no problem: the status's code
    (code_for_status), with the request id and Retry-After of its headers."""
    return make_error(
        status,
        code_for_status(status),
        detail,
        title=title,
        request_id=headers.get("X-Request-ID", ""),
        retry_after=parse_retry_after(headers.get("Retry-After")),
    )


def error_from_response(resp: httpx.Response, body: bytes) -> AgentosError:
    """Turns a non-2xx answer (whose body was read) into an AgentosError. It never
    fails: a body that is not a problem falls back to the status, with a snippet
    of the body as the detail (error_from_status)."""
    text = body[:_MAX_ERROR_BODY].decode("utf-8", "replace")
    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            problem = json.loads(text)
        except ValueError:
            problem = None
        if isinstance(problem, dict) and any(
            isinstance(problem.get(k), str) for k in ("code", "title", "detail")
        ):
            p = cast(dict[str, Any], problem)
            code = p.get("code") or code_for_status(resp.status_code)
            details = p.get("details")
            return make_error(
                resp.status_code,
                code,
                str(p.get("detail") or ""),
                title=str(p.get("title") or resp.reason_phrase),
                details=details if isinstance(details, dict) else None,
                type=str(p.get("type") or ""),
                instance=str(p.get("instance") or ""),
                request_id=str(p.get("requestId") or resp.headers.get("X-Request-ID", "")),
                retry_after=parse_retry_after(resp.headers.get("Retry-After")),
            )
    snippet = text.strip()
    if len(snippet) > 512:
        snippet = snippet[:512] + "…"
    return error_from_status(resp.status_code, snippet, resp.headers, title=resp.reason_phrase)


class NotEventStreamError(Exception):
    """The answer of a stream request was 2xx but not an event stream."""

    def __init__(self, content_type: str) -> None:
        super().__init__(
            f"the answer is not an event stream ({content_type or 'no Content-Type'})"
        )


class StreamCutError(Exception):
    """A connection that ended (or went idle) before the stream's final event,
    and could not be resumed."""


class AttachClosedError(Exception):
    """The attach WebSocket closed before the exit frame; attach again with
    ``after=conn.last_seq``."""

    def __init__(self, close_code: int | None, reason: str = "") -> None:
        what = f"{close_code} {reason}".strip() if close_code is not None else "no close frame"
        super().__init__(f"attach connection closed ({what}) before the exit")
        self.close_code = close_code
        self.reason = reason
