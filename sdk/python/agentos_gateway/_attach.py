"""Attach WebSockets: a shell's terminal or a process's stdio over the gateway's
``agentos-gateway.v1`` protocol (see the spec's AttachServerFrame).

AsyncAttachment is built on the websockets library's asyncio client.
websockets 10.4 (Debian 12's) has no synchronous client, so the sync
Attachment runs an AsyncAttachment on an event loop of its own, in a private
thread that it starts on connect and stops and joins on close.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

import httpx
import websockets.exceptions
import websockets.legacy.client
from websockets.typing import Subprotocol

from . import schema
from ._core import USER_AGENT
from .errors import AgentosError, AttachClosedError, error_from_response, error_from_status, make_error
from .types import AttachEvent, AttachExit, AttachGap, AttachOutput, AttachRefusal

__all__ = ["AsyncAttachment", "Attachment", "exit_error"]

T = TypeVar("T")

PROTOCOL = Subprotocol("agentos-gateway.v1")
# Frames are at most 64 KiB of input; output frames are bounded by the gateway.
MAX_FRAME = 1 << 20


class AsyncAttachment:
    """A WebSocket attached to a shell or a process.

    Iterate over its events with ``async for``: the loop ends after the exit
    frame (AttachExit), when the shell or process ended, and raises
    AttachClosedError when the connection ends before it. ``last_seq`` is the
    sequence number of the last output received, to resume with
    ``attach(after=conn.last_seq)`` after a dropped connection.
    """

    def __init__(self, ws: websockets.legacy.client.WebSocketClientProtocol, process: bool, after: int) -> None:
        self._ws = ws
        self._process = process
        self.last_seq = after
        self._started = False

    @classmethod
    async def connect(
        cls,
        url: str,
        credential: str | None,
        *,
        process: bool,
        after: int = 0,
        open_timeout: float | None = None,
    ) -> AsyncAttachment:
        headers = {"User-Agent": USER_AGENT}
        if credential:
            headers["Authorization"] = f"Bearer {credential}"
        try:
            ws = await websockets.legacy.client.connect(
                url,
                subprotocols=[PROTOCOL],
                extra_headers=headers,
                open_timeout=open_timeout,
                max_size=MAX_FRAME,
                compression=None,
                user_agent_header=None,
            )
        except websockets.exceptions.InvalidStatusCode as e:
            raise await _refusal(url, headers, e) from None
        return cls(ws, process, after)

    async def __aenter__(self) -> AsyncAttachment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection; the shell or process goes on."""
        await self._ws.close(1000)

    async def send(self, data: str | bytes) -> None:
        """Sends input: a shell's keystrokes or a process's stdin bytes (text as
        UTF-8, at most 64 KiB a frame)."""
        await self._ws.send(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Changes a shell's terminal size."""
        await self._ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))

    async def close_stdin(self) -> None:
        """Closes an attached process's stdin, in order with the input sent before."""
        await self._ws.send(json.dumps({"type": "close_stdin"}))

    async def signal(self, signal: str) -> None:
        """Sends an attached process a signal, such as "SIGTERM"."""
        await self._ws.send(json.dumps({"type": "signal", "signal": signal}))

    def __aiter__(self) -> AsyncIterator[AttachEvent]:
        if self._started:
            raise RuntimeError("an attachment can be iterated once")
        self._started = True
        return self._events()

    async def _events(self) -> AsyncIterator[AttachEvent]:
        while True:
            try:
                message = await self._ws.recv()
            except websockets.exceptions.ConnectionClosed as e:
                raise AttachClosedError(e.rcvd.code if e.rcvd else None,
                                        e.rcvd.reason if e.rcvd else "") from None
            if isinstance(message, bytes):
                yield self._output(message)
                continue
            try:
                frame = cast(schema.AttachServerFrame, json.loads(message))
            except ValueError:
                continue
            event = self._frame(frame)
            if event is not None:
                yield event
                if isinstance(event, AttachExit):
                    return

    def _output(self, data: bytes) -> AttachOutput:
        self.last_seq += 1
        if self._process:
            stream: Literal["stdout", "stderr"] = "stderr" if data[:1] == b"\x02" else "stdout"
            return AttachOutput(self.last_seq, data[1:], stream)
        return AttachOutput(self.last_seq, data)

    def _frame(self, f: schema.AttachServerFrame) -> AttachEvent | None:
        kind = f.get("type")
        if kind == "hello":
            self.last_seq = f.get("seq", self.last_seq)
        elif kind == "gap":
            self.last_seq = f.get("to", self.last_seq)
            return AttachGap(f.get("from", 0), f.get("to", 0))
        elif kind == "error":
            return AttachRefusal(f.get("code", "internal"), f.get("detail", ""))
        elif kind == "exit":
            return AttachExit(
                seq=f.get("seq", self.last_seq),
                exit_code=f.get("exitCode"),
                signal=f.get("signal") or None,
                code=f.get("code"),
                detail=f.get("detail", ""),
            )
        return None


async def _refusal(
    url: str, headers: dict[str, str], e: websockets.exceptions.InvalidStatusCode
) -> AgentosError:
    """The gateway's problem for a refused handshake. websockets keeps no body
    of a refused handshake, so the same URL is asked again without the upgrade
    (a GET that changes nothing): the gateway authenticates and finds the target
    before it looks for the upgrade, so an answer with the same status carries
    the same problem. Otherwise the status alone says why."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            resp = await http.get("http" + url[len("ws"):], headers=headers)
    except httpx.HTTPError:
        resp = None
    if resp is not None and resp.status_code == e.status_code:
        err = error_from_response(resp, resp.content)
        if err.details.get("reason") != "websocket_required":
            return err
    return error_from_status(e.status_code, "the gateway refused the WebSocket handshake", e.headers)


class Attachment:
    """The sync form of AsyncAttachment: iterate over its events with ``for``,
    use it in a ``with`` block (or call close) so that its connection and its
    event-loop thread end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, conn: AsyncAttachment) -> None:
        self._loop = loop
        self._thread = thread
        self._conn = conn
        self._started = False

    @classmethod
    def connect(
        cls,
        url: str,
        credential: str | None,
        *,
        process: bool,
        after: int = 0,
        open_timeout: float | None = None,
    ) -> Attachment:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="agentos-gateway-attach", daemon=True)
        thread.start()
        coro = AsyncAttachment.connect(url, credential, process=process, after=after,
                                       open_timeout=open_timeout)
        try:
            conn = asyncio.run_coroutine_threadsafe(coro, loop).result()
        except BaseException:
            _stop(loop, thread)
            raise
        return cls(loop, thread, conn)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the attachment is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # An interrupted wait (KeyboardInterrupt) leaves nothing running.
            future.cancel()
            raise

    @property
    def last_seq(self) -> int:
        """The sequence number of the last output received (or skipped over by a gap)."""
        return self._conn.last_seq

    def __enter__(self) -> Attachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (the shell or process goes on) and ends the thread."""
        if self._thread.is_alive():
            try:
                self._run(self._conn.aclose())
            finally:
                _stop(self._loop, self._thread)

    def send(self, data: str | bytes) -> None:
        self._run(self._conn.send(data))

    def resize(self, cols: int, rows: int) -> None:
        self._run(self._conn.resize(cols, rows))

    def close_stdin(self) -> None:
        self._run(self._conn.close_stdin())

    def signal(self, signal: str) -> None:
        self._run(self._conn.signal(signal))

    def __iter__(self) -> Iterator[AttachEvent]:
        if self._started:
            raise RuntimeError("an attachment can be iterated once")
        self._started = True
        return self._events()

    def _events(self) -> Iterator[AttachEvent]:
        events = self._conn.__aiter__()
        while True:
            try:
                yield self._run(_next(events))
            except StopAsyncIteration:
                return


async def _next(it: AsyncIterator[T]) -> T:
    return await it.__anext__()


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    async def shutdown() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await loop.shutdown_asyncgens()

    try:
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
    except (concurrent.futures.TimeoutError, RuntimeError):
        pass
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def exit_error(event: AttachExit) -> AgentosError | None:
    """The AgentosError an exit with a code stands for (the end was unknowable)."""
    return make_error(0, event.code, event.detail) if event.code else None
