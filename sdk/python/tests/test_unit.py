"""Unit tests of the SDK's pieces that need no gateway: the retry rules, the
SSE parser and resumption, problems, configuration and webhook signatures."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterator

import httpx
import pytest

from agentos_gateway import (
    AgentosError,
    Client,
    ConflictError,
    GapEvent,
    NotFoundError,
    OutputEvent,
    RetryPolicy,
    StreamCutError,
    UnavailableError,
    VMStreamEvent,
    WebhookVerificationError,
    code_for_status,
    sign_webhook,
    verify_webhook,
)
from agentos_gateway._core import SSEDecoder, backoff, resolve_base_url, resolve_credential

FAST = RetryPolicy(max_attempts=3, min_backoff=0.001, max_backoff=0.002, idle_timeout=5)

Handler = Callable[[httpx.Request], httpx.Response]


def mock_client(handler: Handler, retry: RetryPolicy = FAST) -> Client:
    http = httpx.Client(transport=httpx.MockTransport(handler))
    return Client("http://gw.test", api_key="k", retry=retry, http_client=http)


def problem(status: int, code: str, detail: str, **extra: object) -> httpx.Response:
    body = {"type": f"urn:agentos-gateway:problem:{code}", "title": "t", "status": status,
            "detail": detail, "code": code, **extra}
    return httpx.Response(status, json=body, headers={"Content-Type": "application/problem+json"})


VM = {"id": "vm_1", "state": "ready"}


# ---------------------------------------------------------------- retries


def test_a_get_is_retried_on_503_and_sends_the_credential() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return problem(503, "unavailable", "busy") if len(seen) < 3 else httpx.Response(200, json=VM)

    assert mock_client(handler).vm("vm_1").get()["id"] == "vm_1"
    assert len(seen) == 3
    assert seen[0].headers["Authorization"] == "Bearer k"


def test_a_post_without_a_key_is_not_retried() -> None:
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return problem(503, "unavailable", "the sidecar is starting")

    with pytest.raises(UnavailableError) as e:
        mock_client(handler).vm("vm_1").exec("true")
    assert calls == 1 and e.value.detail == "the sidecar is starting"


def test_a_keyed_post_is_retried_with_its_key_after_a_network_failure() -> None:
    keys: list[str | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        keys.append(req.headers.get("Idempotency-Key"))
        if len(keys) == 1:
            raise httpx.ConnectError("connection refused", request=req)
        body = {"exitCode": 0, "stdout": "aGk=", "stderr": "", "encoding": "base64",
                "truncated": False, "durationMs": 1}
        return httpx.Response(200, json=body, headers={"Idempotent-Replayed": "true"})

    r = mock_client(handler).vm("vm_1").exec("echo hi", idempotency_key="key-1")
    assert keys == ["key-1", "key-1"]
    assert (r.stdout, r.replayed) == (b"hi", True)


def test_a_post_without_a_key_is_not_retried_after_a_network_failure() -> None:
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("connection refused", request=req)

    with pytest.raises(httpx.ConnectError):
        mock_client(handler).vm("vm_1").exec("true")
    assert calls == 1


def test_a_streamed_upload_is_never_retried() -> None:
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        req.read()
        return problem(503, "unavailable", "busy")

    with pytest.raises(UnavailableError):
        mock_client(handler).vm("vm_1").write_file("/a", iter([b"x"]))
    assert calls == 1


def test_a_put_gives_up_after_max_attempts() -> None:
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return problem(429, "resource_exhausted", "slow down")

    with pytest.raises(AgentosError) as e:
        mock_client(handler).vm("vm_1").write_file("/a", b"x")
    assert calls == FAST.max_attempts and e.value.code == "resource_exhausted"


def test_backoff_grows_is_bounded_and_honours_retry_after() -> None:
    p = RetryPolicy(min_backoff=0.2, max_backoff=5.0)
    for failures, top in [(1, 0.2), (2, 0.4), (3, 0.8), (10, 5.0)]:
        d = backoff(p, failures, None)
        assert top / 2 <= d <= top
    err = AgentosError(429, "resource_exhausted", retry_after=7.0)
    assert backoff(p, 1, err) == 7.0
    assert backoff(p, 1, AgentosError(429, "resource_exhausted", retry_after=600.0)) == 60.0


# ---------------------------------------------------------------- problems


def test_a_problem_becomes_a_typed_error() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return problem(409, "conflict", "the VM is disposed", details={"state": "disposed"},
                       requestId="req-9", instance="/v1/vms/vm_1")

    with pytest.raises(ConflictError) as e:
        mock_client(handler).vm("vm_1").get()
    err = e.value
    assert (err.status, err.code, err.detail, err.details, err.request_id) == (
        409, "conflict", "the VM is disposed", {"state": "disposed"}, "req-9")
    assert str(err) == "the VM is disposed (409 conflict, request req-9)"
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, ConflictError) and again.details == err.details


def test_an_answer_that_is_no_problem_falls_back_to_its_status() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="nothing here", headers={"X-Request-ID": "r1"})

    with pytest.raises(NotFoundError) as e:
        mock_client(handler).vm("vm_1").get()
    assert (e.value.code, e.value.detail, e.value.request_id) == ("not_found", "nothing here", "r1")


def test_codes_for_statuses_match_the_go_client() -> None:
    assert [code_for_status(s) for s in (400, 401, 403, 404, 410, 418, 429, 502, 504, 599)] == [
        "invalid_argument", "unauthenticated", "permission_denied", "not_found", "not_found",
        "invalid_argument", "resource_exhausted", "unavailable", "deadline_exceeded", "internal"]


# ---------------------------------------------------------------- SSE


def test_the_sse_parser_follows_the_spec_across_chunks() -> None:
    d = SSEDecoder()
    stream = (b"\xef\xbb\xbf: heartbeat\r\nid: 1\r\nevent: stdout\r\ndata: {\"a\":\r\n"
              b"data: 1}\r\n\r\nid: 2\nevent: x\ndata\n\nid: 3\n\n")
    events = []
    # Fed a byte at a time, CRLFs and a multi-byte character cut in two included.
    for i in range(len(stream)):
        events += d.feed(stream[i:i + 1])
    assert [(e.id, e.type, e.data) for e in events] == [("1", "stdout", '{"a":\n1}'), ("2", "x", "")]
    assert d.last_event_id == "3"
    assert [e.data for e in SSEDecoder().feed("data: é\n\n".encode())] == ["é"]


def sse(*events: tuple[int, str, object]) -> bytes:
    return b"".join(
        f"id: {i}\nevent: {name}\ndata: {json.dumps(data)}\n\n".encode() for i, name, data in events
    )


def output(seq: int, text: str) -> tuple[int, str, object]:
    return (seq, "stdout", {"seq": seq, "stream": "stdout", "data": text, "encoding": "utf8",
                            "ts": "2026-01-01T00:00:00Z"})


class _Cut(httpx.SyncByteStream):
    """A body that delivers its bytes, then drops the connection."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise httpx.ReadError("connection reset")


def test_a_followed_stream_resumes_with_last_event_id() -> None:
    seen: list[str | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers.get("Last-Event-ID"))
        headers = {"Content-Type": "text/event-stream"}
        if len(seen) == 1:
            return httpx.Response(200, headers=headers, stream=_Cut(sse(output(1, "a"), output(2, "b"))))
        if len(seen) == 2:
            return problem(503, "unavailable", "restarting")
        body = sse(output(3, "c"), (4, "exit", {"exitCode": 0, "signal": None}))
        return httpx.Response(200, headers=headers, content=body)

    with mock_client(handler).vm("vm_1").process(7).follow() as stream:
        events = list(stream)
    assert seen == [None, "2", "2"]
    assert [e.data for e in events if isinstance(e, OutputEvent)] == [b"a", b"b", b"c"]
    assert stream.last_event_id == "4"


def test_a_followed_stream_gives_up_after_max_attempts_without_progress() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=b": hb\n\n")

    with pytest.raises(StreamCutError), mock_client(handler).vm("vm_1").shell("sh_1").follow() as s:
        list(s)


def test_a_vm_stream_ends_with_the_conflict_event_and_raises_others() -> None:
    def answer(final: str) -> Handler:
        def handler(req: httpx.Request) -> httpx.Response:
            body = sse((1, "state", {"type": "state", "time": "t", "state": "disposed"}),
                       (1, "gap", {"from": 1, "to": 1}),
                       (1, "error", {"code": final, "detail": "the VM ended"}))
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body)
        return handler

    with mock_client(answer("conflict")).vm("vm_1").events() as s:
        events = list(s)
    assert isinstance(events[0], VMStreamEvent) and events[0].event["state"] == "disposed"
    assert events[1] == GapEvent(1, 1)
    with pytest.raises(UnavailableError) as e, mock_client(answer("unavailable")).vm("vm_1").events() as s:
        list(s)
    assert (e.value.status, e.value.detail) == (0, "the VM ended")


# ---------------------------------------------------------------- configuration


def test_the_environment_names_the_gateway_new_names_first(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTOS_URL", "AGENTOS_GATEWAY_URL", "AGENTOS_API_KEY", "AGENTOS_GATEWAY_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_base_url(None) == "http://127.0.0.1:8080"
    assert resolve_credential(None, None) is None
    monkeypatch.setenv("AGENTOS_GATEWAY_URL", "http://old:1/")
    monkeypatch.setenv("AGENTOS_GATEWAY_KEY", "old-key")
    assert (resolve_base_url(None), resolve_credential(None, None)) == ("http://old:1", "old-key")
    monkeypatch.setenv("AGENTOS_URL", "https://new:2/prefix")
    monkeypatch.setenv("AGENTOS_API_KEY", "new-key")
    assert (resolve_base_url(None), resolve_credential(None, None)) == ("https://new:2/prefix", "new-key")
    assert resolve_credential(None, "tok") == "tok"
    with pytest.raises(ValueError):
        resolve_credential("a", "b")
    for bad in ("ftp://h", "http://h/?q=1", "http://u:p@h", "h:80"):
        with pytest.raises(ValueError):
            resolve_base_url(bad)


# ---------------------------------------------------------------- webhooks

# Computed with webhook.Sign of the Go gateway (as the TypeScript SDK's test).
SECRET = "whsec_0123456789abcdef"
BODY = '{"type":"exec.done","vm":"vm_1"}'
HEADERS = {
    "agentos-webhook-timestamp": "1800000000",
    "Agentos-Webhook-Signature": "v1=c8c5d00579083ceb93716a0e985c83c3602568cb6083b471dd60746237bee9d8",
}


def test_verify_webhook_accepts_the_go_signature_within_the_tolerance() -> None:
    verify_webhook(SECRET, HEADERS, BODY, now=1800000000 + 299)
    verify_webhook(SECRET, HEADERS, BODY.encode(), now=1800000000 - 299)
    assert sign_webhook(SECRET, 1800000000, BODY) == HEADERS["Agentos-Webhook-Signature"]


@pytest.mark.parametrize(
    ("secret", "headers", "body", "now", "reason"),
    [
        (SECRET, HEADERS, BODY + " ", 1800000000, "bad_signature"),
        ("whsec_other", HEADERS, BODY, 1800000000, "bad_signature"),
        (SECRET, {**HEADERS, "Agentos-Webhook-Signature": "v2=00"}, BODY, 1800000000, "bad_signature"),
        (SECRET, {**HEADERS, "Agentos-Webhook-Signature": "v1=zz"}, BODY, 1800000000, "bad_signature"),
        (SECRET, HEADERS, BODY, 1800000000 + 301, "stale"),
        (SECRET, {}, BODY, None, "stale"),
    ],
)
def test_verify_webhook_refuses(secret: str, headers: dict[str, str], body: str,
                                now: float | None, reason: str) -> None:
    with pytest.raises(WebhookVerificationError) as e:
        verify_webhook(secret, headers, body, now=now)
    assert e.value.reason == reason
