"""What the sync and the async client share, free of I/O: configuration, the
retry rules, the Server-Sent Events parser and the decoding of events."""

from __future__ import annotations

import asyncio
import base64
import codecs
import json
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import httpx

from . import schema
from .errors import AgentosError, NotEventStreamError, make_error
from .types import (
    ExecEvent,
    ExecResult,
    ExitEvent,
    FileChangeEvent,
    FileRange,
    GapEvent,
    LostEvent,
    OutputEvent,
    ProcessEvent,
    ResyncEvent,
    RetryPolicy,
    SessionEnd,
    SessionStreamEvent,
    SessionUpdate,
    ShellEndEvent,
    ShellEvent,
    UnknownEvent,
    VMEventsEvent,
    VMStreamEvent,
    WatchStreamEvent,
)

E = TypeVar("E")

DEFAULT_URL = "http://127.0.0.1:8080"
# The variables the agentos command line reads (cmd/agentos/config.go): the
# new names first, then the old ones.
URL_VARIABLES = ("AGENTOS_URL", "AGENTOS_GATEWAY_URL")
KEY_VARIABLES = ("AGENTOS_API_KEY", "AGENTOS_GATEWAY_KEY")

# The timeout of a call's connection and of each read, in seconds.
DEFAULT_TIMEOUT = 60.0

# Bounds one event (its data and any single line), as the Go client's DefaultMaxEventSize.
MAX_EVENT_SIZE = 16 << 20

USER_AGENT = "agentos-gateway-python"


def from_env(names: Sequence[str]) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def resolve_base_url(base_url: str | None) -> str:
    """The gateway's address: base_url, else AGENTOS_URL (or the old
    AGENTOS_GATEWAY_URL), else the local default; a path prefix is kept."""
    raw = base_url or from_env(URL_VARIABLES) or DEFAULT_URL
    u = urllib.parse.urlsplit(raw)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"base URL {raw!r}: the scheme must be http or https, with a host")
    if u.query or u.fragment or u.username or u.password:
        raise ValueError(
            f"base URL {raw!r} may not carry a query, a fragment or user information"
        )
    return raw.rstrip("/")


def resolve_credential(api_key: str | None, token: str | None) -> str | None:
    """The credential: an API key, a token, else AGENTOS_API_KEY (or the old
    AGENTOS_GATEWAY_KEY)."""
    if api_key and token:
        raise ValueError("pass an api_key or a token, not both")
    return api_key or token or from_env(KEY_VARIABLES)


def seg(s: str | int) -> str:
    """Escapes one path segment: ids may hold any character."""
    return urllib.parse.quote(str(s), safe="")


def vm_path(vm: str, *rest: str) -> str:
    return "/v1/vms/" + seg(vm) + "".join("/" + r for r in rest)


Query = Mapping[str, str | int | bool | Sequence[str] | None]


def query_params(query: Query | None) -> httpx.QueryParams:
    """Query parameters in order, without the absent (None or False) ones."""
    out: list[tuple[str, str | int | float | bool | None]] = []
    for k, v in (query or {}).items():
        if v is None or v is False:
            continue
        if v is True:
            out.append((k, "true"))
        elif isinstance(v, (str, int)):
            out.append((k, str(v)))
        else:
            out.extend((k, item) for item in v)
    return httpx.QueryParams(out)


# ---------------------------------------------------------------- retries


def retryable_status(status: int) -> bool:
    """429 and 503 say that the gateway did not run the call."""
    return status in (429, 503)


def should_retry(method: str, keyed: bool, err: BaseException) -> bool:
    """Whether a failed call may be sent again, as client/retry.go says."""
    if isinstance(err, AgentosError):
        return retryable_status(err.status) and (
            method in ("GET", "HEAD", "PUT", "DELETE") or keyed
        )
    if isinstance(err, httpx.TransportError):
        # A network failure: the call may or may not have run.
        return method in ("GET", "HEAD") or keyed
    return False


def backoff(policy: RetryPolicy, failures: int, err: BaseException | None) -> float:
    """Seconds to wait before attempt failures+1: exponential, jittered, and at
    least the gateway's Retry-After (up to a minute)."""
    d = policy.min_backoff
    for _ in range(1, failures):
        if d >= policy.max_backoff:
            break
        d *= 2
    d = min(d, policy.max_backoff)
    d = d / 2 + random.random() * (d / 2)
    if isinstance(err, AgentosError) and err.retry_after is not None and err.retry_after > d:
        d = min(err.retry_after, 60.0)
    return d


async def asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def retry_stream(err: BaseException) -> bool:
    """Whether reconnecting a followed stream could help."""
    if isinstance(err, AgentosError):
        return err.status in (429, 502, 503, 504)
    if isinstance(err, NotEventStreamError):
        return False
    # A network failure, a cut connection, an idle timeout.
    return isinstance(err, (httpx.TransportError, StreamCut))


class StreamCut(Exception):
    """A connection that ended before the stream's final event (internal: a
    followed stream resumes, an unfollowed one raises StreamCutError)."""


# ---------------------------------------------------------------- encodings


def decode_data(data: str, encoding: str | None) -> bytes:
    if encoding == "base64":
        return base64.b64decode(data)
    return data.encode("utf-8")


def exec_wire(req: Mapping[str, Any], stdin: str | bytes | None) -> dict[str, Any]:
    """The wire form of an exec request: bytes of stdin travel as base64."""
    out = dict(req)
    if isinstance(stdin, str):
        out.update(stdin=stdin, stdinEncoding="utf8")
    elif stdin is not None:
        out.update(stdin=base64.b64encode(stdin).decode("ascii"), stdinEncoding="base64")
    return out


def exec_result(w: schema.ExecResult, replayed: bool) -> ExecResult:
    return ExecResult(
        exit_code=w["exitCode"],
        stdout=decode_data(w["stdout"], w["encoding"]),
        stderr=decode_data(w["stderr"], w["encoding"]),
        truncated=w["truncated"],
        duration_ms=w["durationMs"],
        signal=w.get("signal") or None,
        replayed=replayed,
    )


def was_replayed(resp: httpx.Response) -> bool:
    """The gateway answered from the record of an earlier call with the same Idempotency-Key."""
    return bool(resp.headers.get("Idempotent-Replayed") == "true")


def range_header(offset: int, length: int) -> str | None:
    """The Range of bytes [offset, offset+length): length 0 reads to the end, a
    negative offset selects the last -offset bytes."""
    if offset < 0:
        return f"bytes={offset}"
    if length > 0:
        return f"bytes={offset}-{offset + length - 1}"
    if offset > 0:
        return f"bytes={offset}-"
    return None


def file_range(resp: httpx.Response, path: str) -> FileRange:
    etag = resp.headers.get("ETag", "")
    modified = resp.headers.get("Last-Modified", "")
    if resp.status_code == 304:
        return FileRange(False, True, 0, 0, -1, etag, modified)
    if resp.status_code == 206:
        cr = resp.headers.get("Content-Range", "")
        unit, _, spec = cr.partition(" ")
        span, _, size = spec.partition("/")
        first, _, last = span.partition("-")
        if unit != "bytes" or not (first.isdigit() and last.isdigit() and size.isdigit()):
            raise ValueError(f"GET {path}: Content-Range {cr!r} is not bytes first-last/size")
        start = int(first)
        return FileRange(True, False, start, int(last) - start + 1, int(size), etag, modified)
    cl = resp.headers.get("Content-Length")
    n = int(cl) if cl is not None and cl.isdigit() else -1
    return FileRange(False, False, 0, n, n, etag, modified)


def event_stream_or_raise(resp: httpx.Response) -> None:
    ctype = resp.headers.get("Content-Type", "")
    if not ctype.lower().startswith("text/event-stream"):
        raise NotEventStreamError(ctype)


# ---------------------------------------------------------------- Server-Sent Events


@dataclass(frozen=True)
class RawEvent:
    """One Server-Sent Event as it came."""

    id: str
    type: str
    data: str


class SSEDecoder:
    """Parses a text/event-stream body fed in chunks, as the HTML spec says:
    events with data come out, comments (the gateway's heartbeats) are
    skipped, and ``last_event_id`` follows the id fields."""

    def __init__(self, last_event_id: str = "") -> None:
        self.last_event_id = last_event_id
        self._buf = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._first = True
        self._type = ""
        self._data: list[str] = []
        self._size = 0
        self._id = last_event_id

    def feed(self, chunk: bytes) -> list[RawEvent]:
        self._buf += self._decoder.decode(chunk)
        if self._first and self._buf:
            self._first = False
            if self._buf.startswith("\ufeff"):
                self._buf = self._buf[1:]
        events: list[RawEvent] = []
        start = 0
        buf = self._buf
        while True:
            cr, lf = buf.find("\r", start), buf.find("\n", start)
            i = min(x for x in (cr, lf) if x >= 0) if cr >= 0 or lf >= 0 else -1
            if i < 0:
                break
            if buf[i] == "\r" and i + 1 == len(buf):
                # A CR at the end of what arrived may be the first half of a CRLF.
                break
            line = buf[start:i]
            start = i + (2 if buf.startswith("\r\n", i) else 1)
            ev = self._line(line)
            if ev is not None:
                events.append(ev)
        self._buf = buf[start:]
        if len(self._buf) > MAX_EVENT_SIZE:
            raise ValueError(f"server-sent event line larger than {MAX_EVENT_SIZE} bytes")
        return events

    def _line(self, line: str) -> RawEvent | None:
        if line == "":
            # The last event id is updated even by an event without data.
            self.last_event_id = self._id
            ev = None
            if self._data:
                ev = RawEvent(self._id, self._type or "message", "\n".join(self._data))
            self._type, self._data, self._size = "", [], 0
            return ev
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > MAX_EVENT_SIZE:
                raise ValueError(f"server-sent event larger than {MAX_EVENT_SIZE} bytes")
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def _json(raw: RawEvent) -> dict[str, Any]:
    try:
        value = json.loads(raw.data)
    except ValueError as e:
        raise ValueError(f"decode {raw.type!r} event: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"decode {raw.type!r} event: not a JSON object")
    return cast(dict[str, Any], value)


Decoded = tuple[E, bool]
"""An event and whether it is the stream's final one."""

Decoder = Callable[[RawEvent], "Decoded[E]"]


def _common(raw: RawEvent) -> Decoded[Any] | None:
    """The events every stream may carry: a final error (raised), lost, gap."""
    if raw.type == "error":
        w = _json(raw)
        raise make_error(0, w.get("code") or "internal", str(w.get("detail") or ""))
    if raw.type == "lost":
        w = _json(raw)
        return LostEvent(w.get("code") or "conflict", str(w.get("detail", "")), str(w.get("node", ""))), True
    if raw.type == "gap":
        w = _json(raw)
        return GapEvent(int(w["from"]), int(w["to"])), False
    return None


def _output(raw: RawEvent) -> OutputEvent:
    w = cast(schema.OutputEvent, _json(raw))
    stream = w.get("stream") or raw.type
    return OutputEvent(
        stream="stderr" if stream == "stderr" else "stdout",
        seq=w["seq"],
        data=decode_data(w["data"], w.get("encoding")),
        ts=w.get("ts", ""),
    )


def _unknown(raw: RawEvent) -> Decoded[UnknownEvent]:
    return UnknownEvent(raw.type, raw.data), False


def decode_exec(raw: RawEvent) -> Decoded[ExecEvent]:
    if raw.type in ("stdout", "stderr"):
        return _output(raw), False
    if raw.type == "exit":
        w = _json(raw)
        return ExitEvent(
            exit_code=int(w.get("exitCode") or 0),
            signal=w.get("signal") or None,
            truncated=bool(w.get("truncated")),
            duration_ms=int(w.get("durationMs") or 0),
        ), True
    return _common(raw) or _unknown(raw)


def decode_process(raw: RawEvent) -> Decoded[ProcessEvent]:
    if raw.type in ("stdout", "stderr"):
        return _output(raw), False
    if raw.type == "exit":
        w = _json(raw)
        return ExitEvent(int(w.get("exitCode") or 0), w.get("signal") or None), True
    return _common(raw) or _unknown(raw)


def decode_shell(raw: RawEvent) -> Decoded[ShellEvent]:
    if raw.type in ("stdout", "stderr"):
        return _output(raw), False
    if raw.type == "end":
        w = _json(raw)
        return ShellEndEvent(int(w.get("exitCode") or 0), w.get("signal") or None), True
    return _common(raw) or _unknown(raw)


def decode_vm(raw: RawEvent) -> Decoded[VMEventsEvent]:
    common = _common(raw)
    if common is not None:
        return common
    return VMStreamEvent(cast(schema.VMEvent, _json(raw))), False


def decode_watch(raw: RawEvent) -> Decoded[WatchStreamEvent]:
    if raw.type in ("create", "modify", "delete", "rename"):
        w = cast(schema.WatchEvent, _json(raw))
        return FileChangeEvent(w), False
    if raw.type == "resync":
        reason = _json(raw).get("reason")
        return ResyncEvent("expired" if reason == "expired" else "unknown"), False
    return _common(raw) or _unknown(raw)


_SESSION_UPDATES = ("durable", "ephemeral", "agent_stderr", "agent_exit", "overflow")


def decode_session(raw: RawEvent) -> Decoded[SessionStreamEvent]:
    if raw.type in _SESSION_UPDATES:
        kind = cast(Any, raw.type)
        return SessionUpdate(kind, _json(raw)), False
    if raw.type == "end":
        return SessionEnd(cast(Any, _json(raw).get("state", "closed"))), True
    return _common(raw) or _unknown(raw)


@dataclass
class StreamSpec(Generic[E]):
    """How to open one stream and what its events are."""

    method: str
    path: str
    decode: Decoder[E]
    query: Query | None = None
    json: Any = None
    idempotency_key: str | None = None
    follow: bool = True
    # A VM's stream ends normally with a conflict error event once the VM ended.
    ends_with_conflict: bool = False
