"""The synchronous client of the gateway: Client and the handles of its VMs,
processes, shells, sessions and webhooks.

Generated from _async_client.py by scripts/unasync.py: do not edit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Literal, cast

import httpx

from . import schema
from ._attach import Attachment
from ._core import (
    DEFAULT_TIMEOUT,
    USER_AGENT,
    E,
    Query,
    StreamCut,
    StreamSpec,
    SSEDecoder,
    sleep,
    backoff,
    decode_exec,
    decode_process,
    decode_session,
    decode_shell,
    decode_vm,
    decode_watch,
    event_stream_or_raise,
    exec_result,
    exec_wire,
    file_range,
    query_params,
    range_header,
    resolve_base_url,
    resolve_credential,
    retry_stream,
    seg,
    should_retry,
    vm_path,
    was_replayed,
)
from .errors import AgentosError, StreamCutError, error_from_response
from .types import (
    ArchiveExtracted,
    ContentBlock,
    CreatedToken,
    CreateScheduleRequest,
    CreateTokenRequest,
    CreateVMRequest,
    CreateWebhookRequest,
    Delivery,
    DirEntry,
    ExecEvent,
    ExecResult,
    ExitStatus,
    FileRange,
    FileWritten,
    Me,
    OpenSessionRequest,
    Page,
    Permission,
    PermissionAnswer,
    Preview,
    ProcessEvent,
    ProcessInfo,
    PromptResult,
    RetryPolicy,
    Schedule,
    ScheduleRun,
    Session,
    SessionConfig,
    SessionHistory,
    SessionStreamEvent,
    Shell,
    ShellEvent,
    Snapshot,
    Stat,
    Token,
    UpdateVMRequest,
    UpdateWebhookRequest,
    VM,
    VMEventsEvent,
    VMState,
    VMUsage,
    WatchStreamEvent,
    Webhook,
    WebhookSecret,
)

__all__ = [
    "Client",
    "Download",
    "EventStream",
    "ProcessHandle",
    "SessionHandle",
    "ShellHandle",
    "VMHandle",
    "WebhookHandle",
]

# A request body: bytes and text are sent (and retried) as they are; an
# iterable of chunks streams, and is never retried.
Body = bytes | str | Iterable[bytes]
Command = str | Sequence[str]


def _command(command: Command, args: Sequence[str] | None) -> dict[str, Any]:
    """A command line (with args: a program) as "command", a sequence as "argv"."""
    if isinstance(command, str):
        out: dict[str, Any] = {"command": command}
        if args is not None:
            out["args"] = list(args)
        return out
    if args is not None:
        raise ValueError("args goes with a command line, not with an argv sequence")
    return {"argv": list(command)}


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _content(content: str | Sequence[ContentBlock]) -> list[ContentBlock]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


class Client:
    """A client of one gateway with one credential: an API key, or a token
    minted with :meth:`create_token`.

    ``base_url`` defaults to ``AGENTOS_URL`` and the credential to
    ``AGENTOS_API_KEY`` (the old ``AGENTOS_GATEWAY_URL`` and
    ``AGENTOS_GATEWAY_KEY`` are read after them). Calls about one VM go through
    its handle, ``client.vm(id)``. Every answer outside 2xx raises an
    :class:`~agentos_gateway.AgentosError`; idempotent calls are retried on 429
    and 503 (see :class:`~agentos_gateway.RetryPolicy`). ``timeout`` bounds
    the connection and each read of a call, in seconds (None: no bound).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        token: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.base_url = resolve_base_url(base_url)
        self.credential = resolve_credential(api_key, token)
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        headers = {"User-Agent": USER_AGENT}
        if self.credential:
            headers["Authorization"] = f"Bearer {self.credential}"
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)
        self._headers = headers

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections (of an http_client passed in: not)."""
        if self._owns_http:
            self._http.close()

    # ------------------------------------------------------------ transport

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        json: Any = None,
        content: Body | None = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        ok_statuses: Sequence[int] = (),
        stream: bool = False,
        once: bool = False,
        timeout: httpx.Timeout | float | None = None,
    ) -> httpx.Response:
        """Sends a request and answers its 2xx response (or one of ok_statuses),
        read unless stream; any other status raises an AgentosError. Idempotent
        requests are retried as the RetryPolicy says."""
        h = dict(self._headers)
        h.setdefault("Accept", "application/json")
        h.update(headers or {})
        if idempotency_key:
            h["Idempotency-Key"] = idempotency_key
        if content_type:
            h["Content-Type"] = content_type
        streamed = content is not None and not isinstance(content, (bytes, str))
        attempts = 1 if once or streamed else self.retry.max_attempts
        keyed = bool(idempotency_key)
        url = self.base_url + path
        failures = 0
        while True:
            request = self._http.build_request(
                method,
                url,
                params=query_params(query),
                json=json,
                content=content,
                headers=h,
                timeout=self.timeout if timeout is None else timeout,
            )
            err: BaseException
            try:
                resp = self._http.send(request, stream=True)
            except httpx.TransportError as e:
                err = e
            else:
                if 200 <= resp.status_code < 300 or resp.status_code in ok_statuses:
                    if not stream:
                        try:
                            resp.read()
                        finally:
                            resp.close()
                    return resp
                try:
                    body = resp.read()
                except httpx.TransportError:
                    body = b""
                finally:
                    resp.close()
                err = error_from_response(resp, body)
            failures += 1
            if failures >= attempts or not should_retry(method, keyed, err):
                raise err
            sleep(backoff(self.retry, failures, err))

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        return (self._send(method, path, **kw)).json()

    def _pages(self, path: str, query: Query | None = None) -> Iterator[Any]:
        """Every item of a paged list, fetching the pages one by one."""
        cursor = ""
        while True:
            page = self._json("GET", path, query={**(query or {}), "cursor": cursor or None})
            for item in page["items"]:
                yield item
            cursor = page.get("nextCursor") or ""
            if not cursor:
                return

    def _stream(self, spec: StreamSpec[E], after: int | str | None) -> EventStream[E]:
        return EventStream(self, spec, "" if after is None else str(after))

    def _ws_url(self, path: str, query: Query) -> str:
        qs = query_params(query)
        url = "ws" + self.base_url[len("http"):] + path
        return f"{url}?{qs}" if qs else url

    # ------------------------------------------------------------ calls

    def ready(self) -> None:
        """Returns once the gateway is ready (GET /readyz); raises UnavailableError before."""
        self._send("GET", "/readyz")

    def me(self) -> Me:
        """The caller: its tenant, key and, for a token, the token."""
        return cast(Me, self._json("GET", "/v1/me"))

    def create_vm(self, request: CreateVMRequest | None = None) -> VM:
        """Creates a VM; ``client.vm(vm["id"])`` makes the calls about it."""
        return cast(VM, self._json("POST", "/v1/vms", json=request or {}))

    def list_vms(
        self,
        *,
        states: Sequence[VMState] | Literal["all"] | None = None,
        labels: Sequence[str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[VM]:
        """One page of the caller's VMs: of the given states (default the live
        ones; "all" for every state) and label selectors ("team=a", "env!=prod")."""
        page = self._json(
            "GET", "/v1/vms", query=self._vm_query(states, labels, limit, cursor)
        )
        return Page(items=cast(list[VM], page["items"]), next_cursor=page["nextCursor"])

    def vms(
        self,
        *,
        states: Sequence[VMState] | Literal["all"] | None = None,
        labels: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[VM]:
        """Iterates over all the caller's VMs that the filters select, page after page."""
        for vm in self._pages("/v1/vms", self._vm_query(states, labels, limit, None)):
            yield cast(VM, vm)

    @staticmethod
    def _vm_query(
        states: Sequence[VMState] | Literal["all"] | None,
        labels: Sequence[str] | None,
        limit: int | None,
        cursor: str | None,
    ) -> Query:
        state = ["all"] if states == "all" else list(states or [])
        return {"state": state, "label": list(labels or []), "limit": limit, "cursor": cursor or None}

    def vm(self, id: str) -> VMHandle:
        """The handle of a VM. It makes no call: a VM that does not exist shows in
        the first call (NotFoundError)."""
        return VMHandle(self, id)

    def create_token(self, request: CreateTokenRequest) -> CreatedToken:
        """Mints a token for a browser or an end user; its secret is in this answer only."""
        return cast(CreatedToken, self._json("POST", "/v1/tokens", json=request))

    def tokens(self) -> list[Token]:
        """The tenant's live tokens."""
        return cast(list[Token], (self._json("GET", "/v1/tokens"))["items"])

    def revoke_token(self, id: str) -> None:
        self._send("DELETE", f"/v1/tokens/{seg(id)}")

    def create_webhook(self, request: CreateWebhookRequest) -> Webhook:
        """Subscribes a URL to events of the tenant (or of one VM)."""
        return cast(Webhook, self._json("POST", "/v1/webhooks", json=request))

    def webhooks(self, *, limit: int | None = None) -> Iterator[Webhook]:
        for w in self._pages("/v1/webhooks", {"limit": limit}):
            yield cast(Webhook, w)

    def webhook(self, id: str) -> WebhookHandle:
        """The handle of a webhook subscription. It makes no call."""
        return WebhookHandle(self, id)

    def webhook_secret(self) -> WebhookSecret:
        """The tenant's webhook signing secret, for verify_webhook."""
        return cast(WebhookSecret, self._json("GET", "/v1/webhook-secret"))

    def snapshots(
        self, *, vm: str | None = None, limit: int | None = None
    ) -> Iterator[Snapshot]:
        """Iterates over the tenant's snapshots (of one VM with vm)."""
        for s in self._pages("/v1/snapshots", {"vm": vm, "limit": limit}):
            yield cast(Snapshot, s)

    def snapshot(self, id: str) -> Snapshot:
        return cast(Snapshot, self._json("GET", f"/v1/snapshots/{seg(id)}"))

    def delete_snapshot(self, id: str) -> None:
        self._send("DELETE", f"/v1/snapshots/{seg(id)}")


class EventStream(Generic[E]):
    """An open stream of the gateway's typed events: iterate over it once with
    ``for``, best inside ``with`` so that leaving the block frees
    the connection.

    It ends after the stream's final event (an exit, a shell's or a session's
    end); a final ``error`` event is raised as an AgentosError with status 0.
    A followed stream reconnects with ``Last-Event-ID`` after a dropped
    connection, so that no event is lost or repeated (a GapEvent says when the
    gateway's buffer no longer held the resume point); ``last_event_id`` is
    where it stands, to resume later with ``after=``.
    """

    def __init__(self, client: Client, spec: StreamSpec[E], last_event_id: str) -> None:
        self._c = client
        self._spec = spec
        self.last_event_id = last_event_id
        self._resp: httpx.Response | None = None
        self._started = False
        self._closed = False

    def __enter__(self) -> EventStream[E]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Ends the stream and frees its connection."""
        self._closed = True
        if self._resp is not None:
            self._resp.close()

    def __iter__(self) -> Iterator[E]:
        if self._started:
            raise RuntimeError("an event stream can be iterated once")
        self._started = True
        return self._events()

    def _open(self) -> httpx.Response:
        s = self._spec
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        idle = self._c.retry.idle_timeout if s.follow else None
        timeout = httpx.Timeout(self._c.timeout, read=idle)
        return self._c._send(
            s.method, s.path, query=s.query, json=s.json, headers=headers,
            idempotency_key=s.idempotency_key, stream=True, once=s.follow, timeout=timeout,
        )

    def _events(self) -> Iterator[E]:
        s = self._spec
        failures = 0
        while not self._closed:
            progressed = False
            err: BaseException
            try:
                resp = self._resp = self._open()
                try:
                    event_stream_or_raise(resp)
                    decoder = SSEDecoder(self.last_event_id)
                    for chunk in resp.iter_bytes():
                        for raw in decoder.feed(chunk):
                            self.last_event_id = raw.id
                            event, final = s.decode(raw)
                            progressed = True
                            yield event
                            if final:
                                return
                    self.last_event_id = decoder.last_event_id
                    raise StreamCut("the connection ended before the stream's final event")
                finally:
                    resp.close()
            except AgentosError as e:
                if e.status == 0:
                    # A final error event: the gateway said why the stream ended.
                    # A VM's stream ends so once the VM ended.
                    if s.ends_with_conflict and e.code == "conflict":
                        return
                    raise
                err = e
            except (httpx.TransportError, StreamCut) as e:
                err = e
            if self._closed:
                return
            if not s.follow or not retry_stream(err):
                if isinstance(err, StreamCut):
                    raise StreamCutError(str(err)) from None
                raise err
            failures = 1 if progressed else failures + 1
            if failures >= self._c.retry.max_attempts:
                raise StreamCutError(
                    f"stream lost, giving up after {failures} attempts: {err}"
                ) from err
            sleep(backoff(self._c.retry, failures, err))


class Download:
    """A file or an archive as it streams in: ``with`` it, then iterate
    over its chunks (or ``read()`` them all). ``range`` says which bytes
    of the file the body holds."""

    range: FileRange

    def __init__(self, client: Client, path: str, query: Query, headers: Mapping[str, str]) -> None:
        self._c = client
        self._path = path
        self._query = query
        self._headers = headers
        self._resp: httpx.Response | None = None

    def __enter__(self) -> Download:
        resp = self._c._send(
            "GET", self._path, query=self._query, headers={"Accept": "*/*", **self._headers},
            ok_statuses=(304,), stream=True,
        )
        self._resp = resp
        try:
            self.range = file_range(resp, str(self._query.get("path")))
        except ValueError:
            resp.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._resp is not None:
            self._resp.close()

    def _response(self) -> httpx.Response:
        if self._resp is None:
            raise RuntimeError("use the download in a with block first")
        return self._resp

    def __iter__(self) -> Iterator[bytes]:
        resp = self._response()
        if resp.status_code != 304:
            for chunk in resp.iter_bytes():
                yield chunk

    def read(self) -> bytes:
        """The whole body (empty when not modified)."""
        return b"".join([chunk for chunk in self])


class VMHandle:
    """Makes the calls about one VM: its commands, processes, shells, files,
    sessions, previews, schedules and snapshots."""

    def __init__(self, client: Client, id: str) -> None:
        self._c = client
        self.id = id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _path(self, *rest: str) -> str:
        return vm_path(self.id, *rest)

    def get(self) -> VM:
        return cast(VM, self._c._json("GET", self._path()))

    def delete(self) -> VM | None:
        """Ends the VM, and is idempotent: a live VM is disposed and its final
        record returned; the record of a VM that already ended is removed and
        None returned."""
        resp = self._c._send("DELETE", self._path())
        return None if resp.status_code == 204 else cast(VM, resp.json())

    def update(self, request: UpdateVMRequest) -> VM:
        """Changes the VM's labels (a None value removes one) and idle settings."""
        return cast(VM, self._c._json("PATCH", self._path(), json=request))

    def hibernate(self) -> VM:
        """Captures the VM's files into the gateway's store and stops it; any call
        that needs it runs it again."""
        return cast(VM, self._c._json("POST", self._path("hibernate")))

    def wake(self) -> VM:
        """Runs a hibernated VM again (or restores a lost one from its checkpoint)."""
        return cast(VM, self._c._json("POST", self._path("wake")))

    def checkpoint(self) -> VM:
        """Stores what changed in the VM's files since its last checkpoint."""
        return cast(VM, self._c._json("POST", self._path("checkpoint")))

    def usage(self) -> VMUsage:
        return cast(VMUsage, self._c._json("GET", self._path("usage")))

    def events(self, *, after: int | str | None = None) -> EventStream[VMEventsEvent]:
        """Follows the VM's events (state changes, limit warnings, process exits)
        until it ends, reconnecting without losing one."""
        spec = StreamSpec("GET", self._path("events"), decode_vm, ends_with_conflict=True)
        return self._c._stream(spec, after)

    def exec(
        self,
        command: Command,
        *,
        args: Sequence[str] | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
        idempotency_key: str | None = None,
    ) -> ExecResult:
        """Runs a command to completion and answers its buffered output.

        ``command`` is a command line (with ``args``: a program) or an argv
        sequence. A timeout raises DeadlineExceededError. With an
        idempotency_key a retry gets the first outcome and never runs the
        command again (and the SDK retries the call after a dropped connection).
        """
        req = self._exec_request(command, args, cwd, env, stdin, timeout_ms, max_output_bytes)
        resp = self._c._send(
            "POST", self._path("exec"), json=req, idempotency_key=idempotency_key,
            timeout=self._exec_timeout(timeout_ms),
        )
        return exec_result(cast(schema.ExecResult, resp.json()), was_replayed(resp))

    def exec_stream(
        self,
        command: Command,
        *,
        args: Sequence[str] | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
        idempotency_key: str | None = None,
    ) -> EventStream[ExecEvent]:
        """Runs a command and streams its output: OutputEvents as it comes, then
        a final ExitEvent. A streamed exec cannot be resumed; spawn a process for
        output that must survive reconnects."""
        req = self._exec_request(command, args, cwd, env, stdin, timeout_ms, max_output_bytes)
        spec = StreamSpec(
            "POST", self._path("exec"), decode_exec, json=req,
            idempotency_key=idempotency_key, follow=False,
        )
        return self._c._stream(spec, None)

    @staticmethod
    def _exec_request(
        command: Command,
        args: Sequence[str] | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: str | bytes | None,
        timeout_ms: int | None,
        max_output_bytes: int | None,
    ) -> dict[str, Any]:
        req = {
            **_command(command, args),
            **_drop_none(cwd=cwd, env=dict(env) if env is not None else None,
                         timeoutMs=timeout_ms, maxOutputBytes=max_output_bytes),
        }
        return exec_wire(req, stdin)

    def _exec_timeout(self, timeout_ms: int | None) -> httpx.Timeout | float | None:
        """A buffered exec answers once the command ended: its reads wait for
        the command's own timeout on top of the client's."""
        if self._c.timeout is None:
            return None
        if timeout_ms:
            return httpx.Timeout(self._c.timeout, read=self._c.timeout + timeout_ms / 1000)
        # The gateway's default exec timeout is 10 minutes.
        return httpx.Timeout(self._c.timeout, read=None)

    def spawn(
        self,
        command: Command,
        *,
        args: Sequence[str] | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> ProcessInfo:
        """Starts a long-running process and answers its record;
        ``vm.process(p["pid"])`` makes the calls about it."""
        req = {**_command(command, args), **_drop_none(cwd=cwd, env=dict(env) if env else None)}
        return cast(ProcessInfo, self._c._json(
            "POST", self._path("processes"), json=req, idempotency_key=idempotency_key,
        ))

    def processes(self) -> list[ProcessInfo]:
        """The VM's processes, exited ones included."""
        return cast(list[ProcessInfo], (self._c._json("GET", self._path("processes")))["items"])

    def process(self, pid: int) -> ProcessHandle:
        return ProcessHandle(self._c, self.id, pid)

    def open_shell(
        self,
        *,
        shell: Literal["sh", "bash"] | None = None,
        cols: int = 80,
        rows: int = 24,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ShellHandle:
        """Opens an interactive shell; attach to it with ``shell.attach()``."""
        req = {"cols": cols, "rows": rows, **_drop_none(shell=shell, cwd=cwd, env=env and dict(env))}
        created = self._c._json("POST", self._path("shells"), json=req)
        return self.shell(cast(schema.ShellCreated, created)["shellId"])

    def shells(self) -> list[Shell]:
        return cast(list[Shell], (self._c._json("GET", self._path("shells")))["items"])

    def shell(self, id: str) -> ShellHandle:
        return ShellHandle(self._c, self.id, id)

    # ------------------------------------------------------------ files

    def write_file(self, path: str, data: Body, *, mkdirs: bool = False) -> FileWritten:
        """Writes a file from bytes, text (as UTF-8) or an iterable of chunks
        (streamed, and then never retried)."""
        return cast(FileWritten, self._c._json(
            "PUT", self._path("files"), query={"path": path, "mkdirs": mkdirs},
            content=data, content_type="application/octet-stream",
        ))

    def read_file_stream(
        self,
        path: str,
        *,
        offset: int = 0,
        length: int = 0,
        if_range: str | None = None,
        if_none_match: str | None = None,
    ) -> Download:
        """Reads a file, or the bytes [offset, offset+length) of it, as it streams
        in (length 0 reads to the end; a negative offset selects the last -offset
        bytes). ``if_range``: an ETag of an earlier read, the whole file comes
        back when it changed since; ``if_none_match``: no body (``range.not_modified``)
        while the file has that ETag. A range outside the file raises
        AgentosError with code range_not_satisfiable."""
        headers = _drop_none(**{
            "Range": range_header(offset, length), "If-Range": if_range,
            "If-None-Match": if_none_match,
        })
        return Download(self._c, self._path("files"), {"path": path}, headers)

    def read_file(self, path: str, *, offset: int = 0, length: int = 0) -> bytes:
        """Reads a file, or a range of it (see read_file_stream), whole into memory."""
        with self.read_file_stream(path, offset=offset, length=length) as f:
            return f.read()

    def read_text(self, path: str) -> str:
        """Reads a text file as UTF-8."""
        return (self.read_file(path)).decode("utf-8")

    def delete_file(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or a directory (with its content when recursive)."""
        self._c._send("DELETE", self._path("files"), query={"path": path, "recursive": recursive})

    def list_dir(
        self, path: str, *, recursive: bool = False, max_depth: int | None = None
    ) -> list[DirEntry]:
        """Lists a directory (and its subdirectories when recursive)."""
        q: Query = {"path": path, "recursive": recursive, "maxDepth": max_depth}
        return cast(list[DirEntry], (self._c._json("GET", self._path("dirs"), query=q))["items"])

    def mkdir(self, path: str) -> None:
        """Creates a directory and its missing parents."""
        self._c._send("POST", self._path("dirs"), json={"path": path})

    def move(self, src: str, dst: str) -> None:
        """Renames a file or a directory."""
        self._c._send("POST", self._path("fs", "move"), json={"from": src, "to": dst})

    def stat(self, path: str) -> Stat:
        return cast(Stat, self._c._json("GET", self._path("fs", "stat"), query={"path": path}))

    def download_archive(self, path: str, *, gzip: bool = False) -> Download:
        """Streams the directory (or file) at path as a tar (or tar.gz) archive."""
        q: Query = {"path": path, "format": "tar.gz" if gzip else None}
        return Download(self._c, self._path("archive"), q, {})

    def upload_archive(
        self, path: str, archive: Body, *, gzip: bool = False, mkdirs: bool = False
    ) -> ArchiveExtracted:
        """Extracts a tar (or tar.gz) archive into the directory at path, all or nothing."""
        return cast(ArchiveExtracted, self._c._json(
            "PUT", self._path("archive"),
            query={"path": path, "format": "tar.gz" if gzip else None, "mkdirs": mkdirs},
            content=archive, content_type="application/gzip" if gzip else "application/x-tar",
        ))

    def watch(
        self,
        path: str,
        *,
        recursive: bool = False,
        interval_ms: int | None = None,
        after: int | str | None = None,
    ) -> EventStream[WatchStreamEvent]:
        """Follows the changes under the directory path, reconnecting without
        losing or repeating one (a ResyncEvent says when the gateway could not
        resume). It ends with a ConflictError when the VM ends."""
        q: Query = {"path": path, "recursive": recursive, "interval": interval_ms}
        return self._c._stream(StreamSpec("GET", self._path("watch"), decode_watch, query=q), after)

    # ------------------------------------------------------------ sessions

    def open_session(self, request: OpenSessionRequest) -> Session:
        """Opens an agent session; ``vm.session(s["id"])`` makes the calls about it."""
        return cast(Session, self._c._json("POST", self._path("sessions"), json=request))

    def sessions(self, *, limit: int | None = None) -> Iterator[Session]:
        for s in self._c._pages(self._path("sessions"), {"limit": limit}):
            yield cast(Session, s)

    def session(self, id: str) -> SessionHandle:
        return SessionHandle(self._c, self.id, id)

    # ------------------------------------------------------------ previews, schedules, snapshots

    def create_preview(self, port: int, *, ttl_seconds: int | None = None) -> Preview:
        """Makes a guest port reachable at a public, unguessable URL."""
        req = _drop_none(port=port, ttlSeconds=ttl_seconds)
        return cast(Preview, self._c._json("POST", self._path("previews"), json=req))

    def previews(self) -> list[Preview]:
        return cast(list[Preview], (self._c._json("GET", self._path("previews")))["items"])

    def preview(self, id: str) -> Preview:
        return cast(Preview, self._c._json("GET", self._path("previews", seg(id))))

    def delete_preview(self, id: str) -> None:
        self._c._send("DELETE", self._path("previews", seg(id)))

    def create_schedule(self, request: CreateScheduleRequest) -> Schedule:
        """Runs an exec or a prompt on a cron schedule."""
        return cast(Schedule, self._c._json("POST", self._path("schedules"), json=request))

    def schedules(self, *, limit: int | None = None) -> Iterator[Schedule]:
        for s in self._c._pages(self._path("schedules"), {"limit": limit}):
            yield cast(Schedule, s)

    def schedule(self, id: str) -> Schedule:
        return cast(Schedule, self._c._json("GET", self._path("schedules", seg(id))))

    def delete_schedule(self, id: str) -> None:
        self._c._send("DELETE", self._path("schedules", seg(id)))

    def schedule_runs(self, id: str, *, limit: int | None = None) -> Iterator[ScheduleRun]:
        for r in self._c._pages(self._path("schedules", seg(id), "runs"), {"limit": limit}):
            yield cast(ScheduleRun, r)

    def create_snapshot(self) -> Snapshot:
        """Captures the VM's files as a snapshot that new VMs can start from."""
        return cast(Snapshot, self._c._json("POST", self._path("snapshots")))

    def fork(self, count: int = 1) -> list[VM]:
        """Starts count new VMs from a snapshot of this one."""
        forked = self._c._json("POST", self._path("fork"), json={"count": count})
        return cast(schema.Forked, forked)["vms"]


class ProcessHandle:
    """Makes the calls about one process."""

    def __init__(self, client: Client, vm_id: str, pid: int) -> None:
        self._c = client
        self.vm_id = vm_id
        self.pid = pid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vm_id!r}, {self.pid})"

    def _path(self, *rest: str) -> str:
        return vm_path(self.vm_id, "processes", str(self.pid), *rest)

    def get(self) -> ProcessInfo:
        return cast(ProcessInfo, self._c._json("GET", self._path()))

    def follow(self, *, after: int | str | None = None) -> EventStream[ProcessEvent]:
        """Follows the process's output until its exit: OutputEvents (whose seq is
        the output's sequence number), a GapEvent when the resume point was no
        longer buffered, then a final ExitEvent. It reconnects with Last-Event-ID
        after a dropped connection so that no output is lost or repeated; after
        resumes after a sequence number an earlier stream reached."""
        return self._c._stream(StreamSpec("GET", self._path("output"), decode_process), after)

    def attach(self, *, after: int = 0) -> Attachment:
        """Attaches over a WebSocket: stdin in, stdout and stderr out."""
        url = self._c._ws_url(self._path("attach"), {"after": after or None})
        return Attachment.connect(url, self._c.credential, process=True, after=after,
                                             open_timeout=self._c.timeout)

    def write_stdin(self, data: str | bytes) -> None:
        self._c._send(
            "POST", self._path("stdin"), content=data, content_type="application/octet-stream"
        )

    def close_stdin(self) -> None:
        self._c._send("POST", self._path("stdin", "close"))

    def signal(self, signal: str) -> None:
        """Sends a signal, such as "SIGTERM"."""
        self._c._send("POST", self._path("signal"), json={"signal": signal})

    def wait(self, *, timeout_ms: int | None = None) -> ExitStatus:
        """Waits for the process to end, at most timeout_ms (DeadlineExceededError after)."""
        timeout = None
        if self._c.timeout is not None:
            read = self._c.timeout + timeout_ms / 1000 if timeout_ms else None
            timeout = httpx.Timeout(self._c.timeout, read=read)
        return cast(ExitStatus, self._c._json(
            "GET", self._path("wait"), query={"timeoutMs": timeout_ms}, timeout=timeout,
        ))


class ShellHandle:
    """Makes the calls about one shell."""

    def __init__(self, client: Client, vm_id: str, id: str) -> None:
        self._c = client
        self.vm_id = vm_id
        self.id = id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vm_id!r}, {self.id!r})"

    def _path(self, *rest: str) -> str:
        return vm_path(self.vm_id, "shells", seg(self.id), *rest)

    def get(self) -> Shell:
        return cast(Shell, self._c._json("GET", self._path()))

    def attach(
        self, *, after: int = 0, queries: Literal["client", "gateway"] | None = None
    ) -> Attachment:
        """Attaches over a WebSocket: keystrokes in, terminal output out, resize.
        ``queries="gateway"`` leaves the shell's terminal queries to the gateway,
        for clients that are not terminal emulators."""
        url = self._c._ws_url(self._path("attach"), {"after": after or None, "queries": queries})
        return Attachment.connect(url, self._c.credential, process=False, after=after,
                                             open_timeout=self._c.timeout)

    def input(self, data: str | bytes) -> None:
        """Sends keystrokes."""
        self._c._send(
            "POST", self._path("input"), content=data, content_type="application/octet-stream"
        )

    def resize(self, cols: int, rows: int) -> None:
        self._c._send("POST", self._path("resize"), json={"cols": cols, "rows": rows})

    def follow(self, *, after: int | str | None = None) -> EventStream[ShellEvent]:
        """Follows the shell's output over SSE until its end, reconnecting without losing output."""
        return self._c._stream(StreamSpec("GET", self._path("output"), decode_shell), after)

    def close(self) -> None:
        """Ends the shell if it runs and removes its record."""
        self._c._send("DELETE", self._path())


class SessionHandle:
    """Makes the calls about one agent session."""

    def __init__(self, client: Client, vm_id: str, id: str) -> None:
        self._c = client
        self.vm_id = vm_id
        self.id = id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vm_id!r}, {self.id!r})"

    def _path(self, *rest: str) -> str:
        return vm_path(self.vm_id, "sessions", seg(self.id), *rest)

    def get(self) -> Session:
        return cast(Session, self._c._json("GET", self._path()))

    def delete(self) -> None:
        self._c._send("DELETE", self._path())

    def unload(self) -> Session:
        """Stops the session's agent process; its next use loads it again."""
        return cast(Session, self._c._json("POST", self._path("unload")))

    def prompt(
        self, content: str | Sequence[ContentBlock], *, idempotency_key: str | None = None
    ) -> PromptResult:
        """Runs a turn and waits for its end. With an idempotency_key a retry of
        the same prompt gets the recorded result of the first, not a second turn."""
        req: schema.PromptRequest = {"content": _content(content)}
        if idempotency_key:
            req["idempotencyKey"] = idempotency_key
        resp = self._c._send(
            "POST", self._path("prompt"), json=req, idempotency_key=idempotency_key,
            timeout=httpx.Timeout(self._c.timeout, read=None),
        )
        out = cast(schema.PromptResult, resp.json())
        return PromptResult(out["stopReason"], out.get("message"), was_replayed(resp))

    def prompt_async(
        self, content: str | Sequence[ContentBlock], *, idempotency_key: str | None = None
    ) -> None:
        """Starts a turn and returns at once; follow it with events()."""
        req: schema.PromptRequest = {"content": _content(content)}
        if idempotency_key:
            req["idempotencyKey"] = idempotency_key
        self._c._send(
            "POST", self._path("prompt"), json=req, headers={"Prefer": "respond-async"},
            idempotency_key=idempotency_key,
        )

    def cancel(self) -> str:
        """Cancels the running turn; answers the CancelResult's status."""
        out = self._c._json("POST", self._path("cancel"))
        return cast(schema.CancelResult, out)["status"]

    def permissions(self) -> list[Permission]:
        """The session's pending permission requests."""
        return cast(list[Permission], (self._c._json("GET", self._path("permissions")))["items"])

    def answer_permission(self, request_id: str, option_id: str) -> PermissionAnswer:
        """Answers a pending permission request with one of its options."""
        return cast(PermissionAnswer, self._c._json(
            "POST", self._path("permissions", seg(request_id)), json={"optionId": option_id},
        ))

    def config(self) -> SessionConfig:
        return cast(SessionConfig, self._c._json("GET", self._path("config")))

    def set_config(self, config_id: str, value: Any) -> SessionConfig:
        return cast(SessionConfig, self._c._json(
            "PUT", self._path("config", seg(config_id)), json={"value": value},
        ))

    def history(self, *, after: int | None = None, limit: int | None = None) -> SessionHistory:
        return cast(SessionHistory, self._c._json(
            "GET", self._path("history"), query={"after": after, "limit": limit},
        ))

    def events(self, *, after: int | str | None = None) -> EventStream[SessionStreamEvent]:
        """Follows the session's events until it ends: durable ones (whose id is
        their sequence) and live-only ones. It reconnects with Last-Event-ID so
        that every durable event comes exactly once; after resumes after a
        durable sequence."""
        return self._c._stream(StreamSpec("GET", self._path("events"), decode_session), after)


class WebhookHandle:
    """Makes the calls about one webhook subscription."""

    def __init__(self, client: Client, id: str) -> None:
        self._c = client
        self.id = id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _path(self, *rest: str) -> str:
        return f"/v1/webhooks/{seg(self.id)}" + "".join("/" + r for r in rest)

    def get(self) -> Webhook:
        return cast(Webhook, self._c._json("GET", self._path()))

    def update(self, request: UpdateWebhookRequest) -> Webhook:
        """Changes the subscription; ``{"enabled": True}`` re-enables one the gateway disabled."""
        return cast(Webhook, self._c._json("PATCH", self._path(), json=request))

    def delete(self) -> None:
        self._c._send("DELETE", self._path())

    def deliveries(
        self,
        *,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Delivery]:
        """Iterates over the subscription's deliveries, newest first."""
        q: Query = {"status": status, "after": after, "limit": limit}
        for d in self._c._pages(self._path("deliveries"), q):
            yield cast(Delivery, d)

    def redeliver(self, delivery_id: str) -> Delivery:
        """Sends a delivery again."""
        return cast(Delivery, self._c._json(
            "POST", self._path("deliveries", seg(delivery_id), "redeliver"),
        ))
