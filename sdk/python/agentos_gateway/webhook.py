"""Verification of the gateway's webhook requests (see docs/webhooks.md).

Each request is signed with the tenant's webhook secret
(``client.webhook_secret()``): ``Agentos-Webhook-Signature`` is ``v1=`` and the
hex HMAC-SHA256 of the ``Agentos-Webhook-Timestamp`` header, a full stop and
the raw body.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from typing import Any, Literal, Protocol

__all__ = [
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "WEBHOOK_TOLERANCE",
    "WebhookHeaders",
    "WebhookVerificationError",
    "sign_webhook",
    "verify_webhook",
]

WEBHOOK_TIMESTAMP_HEADER = "Agentos-Webhook-Timestamp"
"""The Unix time, in seconds, at which the request was signed."""
WEBHOOK_SIGNATURE_HEADER = "Agentos-Webhook-Signature"
"""``v1=`` and the hex HMAC-SHA256 of the timestamp, a full stop and the body."""
WEBHOOK_ID_HEADER = "Agentos-Webhook-Id"
"""The invocation id, the same for every attempt, for receivers that deduplicate."""
WEBHOOK_TOLERANCE = 300.0
"""How far, in seconds, a webhook's timestamp may be from now (as the Go client's WebhookTolerance)."""

_VERSION = "v1="
_INTEGER = re.compile(r"-?[0-9]+")


class WebhookHeaders(Protocol):
    """A request's headers: a dict, an ``http.server`` request's ``self.headers``
    (an email Message), httpx's or a web framework's Headers."""

    def get(self, key: str, /) -> Any: ...

    def items(self) -> Iterable[tuple[str, Any]]: ...


class WebhookVerificationError(Exception):
    """A webhook request failed verification: ``reason`` is ``bad_signature`` or
    ``stale`` (a timestamp missing or outside the tolerance)."""

    def __init__(self, reason: Literal["bad_signature", "stale"]) -> None:
        super().__init__(
            "webhook timestamp is outside the tolerance"
            if reason == "stale"
            else "webhook signature does not match"
        )
        self.reason = reason


def _mac(secret: str, timestamp: str, body: bytes) -> bytes:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).digest()


def _bytes(body: bytes | str) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else body


def sign_webhook(secret: str, unix_seconds: int, body: bytes | str) -> str:
    """The signature header value of body signed at unix_seconds, as the gateway
    computes it (for tests of receivers)."""
    return _VERSION + _mac(secret, str(int(unix_seconds)), _bytes(body)).hex()


def _header(headers: WebhookHeaders, name: str) -> str:
    """The header's value, its name in any case (a dict's keys are case-sensitive)."""
    value = headers.get(name)
    if value is None:
        lower = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lower), "")
    return str(value)


def verify_webhook(
    secret: str,
    headers: WebhookHeaders,
    body: bytes | str,
    *,
    now: float | None = None,
    tolerance: float = WEBHOOK_TOLERANCE,
) -> None:
    """Checks a webhook request as a receiver must, with its raw body (as it came,
    before any JSON parsing): the signature must match, and the timestamp be
    within tolerance seconds of now (default 5 minutes) so that replays of old
    requests fail. Raises WebhookVerificationError otherwise.

    headers are the request's, as a dict (names in any case), an
    ``http.server`` request's ``self.headers`` or a framework's Headers.
    """
    timestamp = _header(headers, WEBHOOK_TIMESTAMP_HEADER).strip()
    signature = _header(headers, WEBHOOK_SIGNATURE_HEADER).strip()
    if not _INTEGER.fullmatch(timestamp):
        raise WebhookVerificationError("stale")
    skew = (time.time() if now is None else now) - int(timestamp)
    if abs(skew) > tolerance:
        raise WebhookVerificationError("stale")
    if not signature.startswith(_VERSION):
        raise WebhookVerificationError("bad_signature")
    try:
        got = bytes.fromhex(signature[len(_VERSION):])
    except ValueError:
        raise WebhookVerificationError("bad_signature") from None
    if not hmac.compare_digest(got, _mac(secret, timestamp, _bytes(body))):
        raise WebhookVerificationError("bad_signature")
