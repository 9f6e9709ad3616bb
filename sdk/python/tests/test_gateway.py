"""The SDK against a real gateway and sidecar (the session's gateway fixture)."""

from __future__ import annotations

import asyncio
import io
import queue
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from agentos_gateway import (
    AgentosError,
    AsyncClient,
    AttachExit,
    AttachOutput,
    Client,
    ExitEvent,
    FileChangeEvent,
    InvalidArgumentError,
    NotFoundError,
    OutputEvent,
    PermissionDeniedError,
    RetryPolicy,
    StreamCutError,
    VMHandle,
    WebhookVerificationError,
    verify_webhook,
)

from .conftest import Gateway

# Bounds each wait of a test on the gateway.
WAIT = 60.0


@pytest.fixture(scope="module")
def vm(client: Client) -> Iterator[VMHandle]:
    handle = client.vm(client.create_vm({"labels": {"sdk": "python"}})["id"])
    yield handle
    handle.delete()


def test_exec_answers_the_exit_code_and_output(vm: VMHandle) -> None:
    r = vm.exec("echo hello; echo oops >&2; exit 3")
    assert (r.exit_code, r.stdout_text, r.stderr_text, r.replayed) == (3, "hello\n", "oops\n", False)
    assert vm.exec(["pwd"]).stdout_text.strip() == "/workspace"


def test_exec_with_an_idempotency_key_runs_once(vm: VMHandle) -> None:
    key = f"sdk-py-{uuid.uuid4()}"
    first = vm.exec("echo $RANDOM$RANDOM", idempotency_key=key)
    again = vm.exec("echo $RANDOM$RANDOM", idempotency_key=key)
    assert not first.replayed and again.replayed
    assert again.stdout == first.stdout


def test_exec_takes_bytes_on_stdin(vm: VMHandle) -> None:
    assert vm.exec(["wc", "-c"], stdin=bytes([0, 1, 2, 255])).stdout_text.strip() == "4"
    assert vm.exec("cat", stdin="héllo").stdout_text == "héllo"


def test_a_refused_call_raises_the_gateways_problem(vm: VMHandle) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        vm.exec("true", cwd="/no/such/dir")
    assert (e.value.status, e.value.code, e.value.details.get("field")) == (400, "invalid_argument", "cwd")
    assert e.value.detail and str(e.value).startswith(e.value.detail)
    with pytest.raises(NotFoundError) as nf:
        vm.read_file("/workspace/missing.txt")
    assert nf.value.code == "not_found" and nf.value.request_id


def test_exec_stream_yields_typed_events_and_ends_with_exit(vm: VMHandle) -> None:
    with vm.exec_stream("echo out; echo err >&2; exit 7") as stream:
        events = list(stream)
    out = b"".join(e.data for e in events if isinstance(e, OutputEvent) and e.stream == "stdout")
    err = b"".join(e.data for e in events if isinstance(e, OutputEvent) and e.stream == "stderr")
    assert (out, err) == (b"out\n", b"err\n")
    last = events[-1]
    assert isinstance(last, ExitEvent) and last.exit_code == 7 and last.duration_ms is not None


def test_the_async_client_streams_and_pages(gateway: Gateway, vm: VMHandle) -> None:
    async def run() -> None:
        async with AsyncClient(gateway.base_url, api_key=gateway.api_key) as ac:
            avm = ac.vm(vm.id)
            events = []
            async with avm.exec_stream(["sh", "-c", "printf a; printf b >&2"]) as stream:
                async for ev in stream:
                    events.append(ev)
            assert isinstance(events[-1], ExitEvent) and events[-1].exit_code == 0
            assert {e.stream for e in events if isinstance(e, OutputEvent)} == {"stdout", "stderr"}
            ids = [v["id"] async for v in ac.vms(labels=["sdk=python"], limit=1)]
            assert ids == [vm.id]

    asyncio.run(asyncio.wait_for(run(), WAIT))


def test_follow_resumes_after_the_last_event_id(vm: VMHandle) -> None:
    p = vm.spawn("for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done")
    proc = vm.process(p["pid"])
    with proc.follow() as stream:
        first = next(e for e in stream if isinstance(e, OutputEvent))
        resume_at = stream.last_event_id
    assert resume_at == str(first.seq)
    with proc.follow(after=resume_at) as stream:
        rest = list(stream)
    outputs = [e for e in rest if isinstance(e, OutputEvent)]
    # Nothing is lost or repeated across the two connections.
    assert [e.seq for e in outputs] == list(range(first.seq + 1, first.seq + 1 + len(outputs)))
    assert first.data + b"".join(e.data for e in outputs) == b"".join(b"line%d\n" % i for i in range(1, 6))
    assert isinstance(rest[-1], ExitEvent) and rest[-1].exit_code == 0
    assert proc.wait(timeout_ms=10_000)["exitCode"] == 0


def test_a_cancelled_async_stream_ends_at_once(gateway: Gateway, vm: VMHandle) -> None:
    async def consume(ac: AsyncClient) -> None:
        async with ac.vm(vm.id).exec_stream("sleep 30") as stream:
            async for _ in stream:
                pass

    async def run() -> float:
        async with AsyncClient(gateway.base_url, api_key=gateway.api_key) as ac:
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(consume(ac), 2)
            return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(run(), WAIT)) < 10


def test_a_silent_followed_stream_is_resumed_then_given_up(gateway: Gateway, vm: VMHandle) -> None:
    p = vm.spawn("sleep 30")
    policy = RetryPolicy(max_attempts=2, min_backoff=0.05, max_backoff=0.1, idle_timeout=1)
    started = time.monotonic()
    with Client(gateway.base_url, api_key=gateway.api_key, retry=policy) as c:
        with pytest.raises(StreamCutError, match="giving up after 2 attempts"):
            with c.vm(vm.id).process(p["pid"]).follow() as stream:
                list(stream)
    # Two idle connections of 1 s each, long before the gateway's 15 s heartbeat.
    assert time.monotonic() - started < 10
    vm.process(p["pid"]).signal("SIGKILL")


def test_files_as_bytes_ranges_and_streams(vm: VMHandle) -> None:
    data = bytes(range(256)) * 64
    written = vm.write_file("/workspace/files/data.bin", data, mkdirs=True)
    assert written == {"path": "/workspace/files/data.bin", "size": len(data)}
    assert vm.read_file("/workspace/files/data.bin") == data
    assert vm.read_file("/workspace/files/data.bin", offset=10, length=5) == data[10:15]
    assert vm.read_file("/workspace/files/data.bin", offset=-3) == data[-3:]
    with vm.read_file_stream("/workspace/files/data.bin", offset=100) as f:
        assert (f.range.partial, f.range.start, f.range.size) == (True, 100, len(data))
        assert b"".join(f) == data[100:]
        etag = f.range.etag
    with vm.read_file_stream("/workspace/files/data.bin", if_none_match=etag) as f:
        assert f.range.not_modified and f.read() == b""
    # A streamed upload: chunks from an iterator.
    vm.write_file("/workspace/files/chunks.txt", iter([b"one ", b"two"]))
    assert vm.read_text("/workspace/files/chunks.txt") == "one two"
    assert vm.stat("/workspace/files/data.bin")["size"] == len(data)
    vm.move("/workspace/files/chunks.txt", "/workspace/files/moved.txt")
    assert sorted(e["name"] for e in vm.list_dir("/workspace/files")) == ["data.bin", "moved.txt"]
    vm.delete_file("/workspace/files", recursive=True)
    with pytest.raises(NotFoundError):
        vm.stat("/workspace/files")


def test_archives_go_up_and_come_back(vm: VMHandle) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in [("a.txt", b"alpha"), ("sub/b.txt", b"beta")]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    out = vm.upload_archive("/workspace/tree", buf.getvalue(), gzip=True, mkdirs=True)
    assert (out["files"], out["bytes"]) == (2, 9)
    with vm.download_archive("/workspace/tree") as archive:
        tar_bytes = archive.read()
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        files = {m.name.lstrip("./"): tar.extractfile(m).read()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    assert files == {"a.txt": b"alpha", "sub/b.txt": b"beta"}


def test_watch_reports_a_change(vm: VMHandle) -> None:
    vm.mkdir("/workspace/watched")
    with vm.watch("/workspace/watched") as stream:
        # The watch is registered once its stream is open: write from a thread
        # after the first read starts.
        timer = threading.Timer(1.0, vm.write_file, ("/workspace/watched/new.txt", b"x"))
        timer.start()
        try:
            change = next(e for e in stream if isinstance(e, FileChangeEvent))
        finally:
            timer.join()
    assert change.event["path"] == "/workspace/watched/new.txt"
    assert change.event["type"] in ("create", "modify")


def test_a_shell_attached_over_the_websocket(vm: VMHandle) -> None:
    shell = vm.open_shell(cols=100, rows=30)
    output = b""
    with shell.attach() as conn:
        conn.resize(120, 40)
        conn.send("echo hi-$((1+2))\n")
        conn.send("exit 5\n")
        events = list(conn)
    output = b"".join(e.data for e in events if isinstance(e, AttachOutput))
    assert b"hi-3" in output
    end = events[-1]
    assert isinstance(end, AttachExit) and end.exit_code == 5 and end.seq == conn.last_seq
    # The sync attachment's event-loop thread ended with it.
    assert not [t for t in threading.enumerate() if t.name == "agentos-gateway-attach"]
    assert shell.get()["state"] == "exited"
    shell.close()


def test_a_process_attached_from_the_async_client(gateway: Gateway, vm: VMHandle) -> None:
    async def run() -> None:
        async with AsyncClient(gateway.base_url, api_key=gateway.api_key) as ac:
            avm = ac.vm(vm.id)
            p = await avm.spawn("read l; echo to-out $l; echo to-err >&2; exit 4")
            async with await avm.process(p["pid"]).attach() as conn:
                await conn.send("x\n")
                await conn.close_stdin()
                streams = {"stdout": b"", "stderr": b""}
                end = None
                async for ev in conn:
                    if isinstance(ev, AttachOutput) and ev.stream:
                        streams[ev.stream] += ev.data
                    elif isinstance(ev, AttachExit):
                        end = ev
            assert streams == {"stdout": b"to-out x\n", "stderr": b"to-err\n"}
            assert end is not None and end.exit_code == 4

    asyncio.run(asyncio.wait_for(run(), WAIT))


def test_a_token_can_exec_in_its_vm_but_not_create_a_vm(gateway: Gateway, client: Client, vm: VMHandle) -> None:
    tok = client.create_token({"scopes": ["vm:read", "exec"], "vm": vm.id, "ttlSeconds": 600, "label": "py"})
    try:
        with Client(gateway.base_url, token=tok["token"]) as tc:
            assert tc.vm(vm.id).exec("echo from-token").stdout_text == "from-token\n"
            with pytest.raises(PermissionDeniedError) as e:
                tc.create_vm()
            assert (e.value.status, e.value.code) == (403, "permission_denied")
            assert e.value.detail in str(e.value)
            # A refused attach handshake carries the gateway's problem too.
            shell = vm.open_shell()
            try:
                with pytest.raises(PermissionDeniedError) as refused:
                    tc.vm(vm.id).shell(shell.id).attach()
                assert refused.value.details.get("scope") == "shells"
                assert tok["id"] in refused.value.detail
            finally:
                shell.close()
        assert any(t["id"] == tok["id"] for t in client.tokens())
    finally:
        client.revoke_token(tok["id"])
    assert all(t["id"] != tok["id"] for t in client.tokens())


class _Receiver(BaseHTTPRequestHandler):
    """Records each webhook request the gateway sends."""

    received: queue.Queue[tuple[Message, bytes]]

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.put((self.headers, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_real_webhook_delivery_verifies(client: Client, vm: VMHandle) -> None:
    received: queue.Queue[tuple[Message, bytes]] = queue.Queue()
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    hook = client.create_webhook({
        "url": f"http://127.0.0.1:{server.server_address[1]}/hook",
        "events": ["process.exit"],
        "vm": vm.id,
    })
    try:
        p = vm.spawn("true")
        vm.process(p["pid"]).wait(timeout_ms=10_000)
        headers, body = received.get(timeout=WAIT)
    finally:
        client.webhook(hook["id"]).delete()
        server.shutdown()
        server.server_close()
        serving.join(WAIT)
    secret = client.webhook_secret()["secret"]
    # The Go gateway's signature checks out (with http.server's headers as they
    # are, and as a dict of lowercase names), and any change breaks it.
    verify_webhook(secret, headers, body)
    verify_webhook(secret, {k.lower(): v for k, v in headers.items()}, body)
    assert b'"process.exit"' in body and vm.id.encode() in body
    with pytest.raises(WebhookVerificationError) as e:
        verify_webhook(secret, headers, body + b" ")
    assert e.value.reason == "bad_signature"
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_other", headers, body)
    with pytest.raises(WebhookVerificationError) as stale:
        verify_webhook(secret, headers, body, now=time.time() + 3600)
    assert stale.value.reason == "stale"


def test_vms_iterate_over_pages_by_label(client: Client, vm: VMHandle) -> None:
    other = client.vm(client.create_vm({"labels": {"sdk": "python", "second": "yes"}})["id"])
    try:
        ids = [v["id"] for v in client.vms(labels=["sdk=python"], limit=1)]
        assert sorted(ids) == sorted([vm.id, other.id])
        page = client.list_vms(labels=["sdk=python"], limit=1)
        assert len(page.items) == 1 and page.next_cursor
        assert [v["id"] for v in client.vms(labels=["second=yes"])] == [other.id]
        updated = other.update({"labels": {"second": None, "third": "3"}})
        assert updated["labels"] == {"sdk": "python", "third": "3"}
    finally:
        assert other.delete() is not None
    # Deleting a VM that ended removes its record: idempotent.
    assert other.delete() is None


def test_snapshots_previews_and_schedules(client: Client, vm: VMHandle) -> None:
    vm.write_file("/workspace/snap.txt", b"in the snapshot")
    snap = vm.create_snapshot()
    try:
        assert [s["id"] for s in client.snapshots(vm=vm.id)] == [snap["id"]]
        assert client.snapshot(snap["id"])["vmId"] == vm.id
    finally:
        client.delete_snapshot(snap["id"])
    with pytest.raises(NotFoundError):
        client.snapshot(snap["id"])

    preview = vm.create_preview(8000, ttl_seconds=60)
    assert preview["port"] == 8000 and preview.get("url")
    assert [p["id"] for p in vm.previews()] == [preview["id"]]
    vm.delete_preview(preview["id"])
    assert vm.previews() == []

    schedule = vm.create_schedule({"cron": "@hourly", "action": {"exec": {"command": "true"}}})
    assert vm.schedule(schedule["id"])["cron"] == "@hourly"
    assert [s["id"] for s in vm.schedules()] == [schedule["id"]]
    assert list(vm.schedule_runs(schedule["id"])) == []
    vm.delete_schedule(schedule["id"])


def test_hibernate_and_wake_keep_the_files(client: Client) -> None:
    vm = client.vm(client.create_vm()["id"])
    try:
        vm.write_file("/workspace/kept.txt", b"kept")
        assert vm.hibernate()["state"] in ("hibernating", "hibernated")
        deadline = time.monotonic() + WAIT
        while vm.get()["state"] != "hibernated":
            assert time.monotonic() < deadline, "the VM did not hibernate in time"
            time.sleep(0.2)
        vm.wake()
        assert vm.read_file("/workspace/kept.txt") == b"kept"
        assert vm.get()["state"] == "ready"
    finally:
        vm.delete()


def test_a_session_for_an_unknown_agent_is_refused(vm: VMHandle) -> None:
    with pytest.raises(AgentosError) as e:
        vm.open_session({"agent": "no-such-agent"})
    assert e.value.status == 400 and e.value.details.get("reason") == "unknown_agent"
    assert list(vm.sessions()) == []
