"""A scripted mock of the Anthropic Messages API, for the agents (claude-code,
pi) that sessions run inside a VM: they reach it over host loopback, offline
and without keys, as internal/mockanthropic serves the Go tests.

The reply follows the last content block of the last message: a
``tool_result`` gets DONE_TEXT; text ``RUN_TOOL:<name>:<json input>`` a call of
that tool (when the request offers it); anything else HELLO_TEXT in chunks.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HELLO_CHUNKS = ["Hello", " from", " the", " mock", " LLM."]
HELLO_TEXT = "".join(HELLO_CHUNKS)
DONE_TEXT = "done"
API_KEY = "sk-mock-not-a-real-key"


def _reply(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks of the reply and its stop reason."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content")
    last: dict[str, Any] = {"type": "text", "text": content} if isinstance(content, str) else (content or [{}])[-1]
    if last.get("type") == "tool_result":
        return [{"type": "text", "text": DONE_TEXT}], "end_turn"
    # Only the last line of the prompt counts, as in internal/mockmodel.
    text = str(last.get("text", "")).strip().rsplit("\n", 1)[-1].strip()
    tools = {t.get("name") for t in body.get("tools") or []}
    if "RUN_TOOL:" in text:
        name, _, raw = text.split("RUN_TOOL:", 1)[1].partition(":")
        try:
            tool_input, _ = json.JSONDecoder().raw_decode(raw)
        except ValueError:
            tool_input = None
        if name in tools and isinstance(tool_input, dict):
            return [{"type": "tool_use", "id": "toolu_1", "name": name, "input": tool_input}], "tool_use"
        return [{"type": "text", "text": f"No tool named {name}."}], "end_turn"
    return [{"type": "text", "text": HELLO_TEXT}], "end_turn"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[dict[str, Any]]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _json(self, status: int, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        path = self.path.split("?", 1)[0]
        if path.endswith("/v1/messages/count_tokens"):
            self._json(200, {"input_tokens": 42})
            return
        if not path.endswith("/v1/messages"):
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
            return
        blocks, stop = _reply(body)
        self.requests.append({"body": body, "reply": blocks})
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model", ""),
                   "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}
        if not body.get("stream"):
            self._json(200, {**message, "content": blocks, "stop_reason": stop})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in _events(message, blocks, stop):
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def _events(message: dict[str, Any], blocks: list[dict[str, Any]], stop: str) -> Iterator[dict[str, Any]]:
    yield {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            yield {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            chunks = HELLO_CHUNKS if block["text"] == HELLO_TEXT else [block["text"]]
            for chunk in chunks:
                yield {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": chunk}}
        else:
            start = {k: v for k, v in block.items() if k != "input"} | {"input": {}}
            yield {"type": "content_block_start", "index": i, "content_block": start}
            yield {"type": "content_block_delta", "index": i,
                   "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}
        yield {"type": "content_block_stop", "index": i}
    yield {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
           "usage": {"output_tokens": 5}}
    yield {"type": "message_stop"}


class MockAnthropic:
    def __init__(self, server: ThreadingHTTPServer, requests: list[dict[str, Any]]) -> None:
        self.port: int = server.server_address[1]
        self.requests = requests

    def env(self) -> dict[str, str]:
        """The session environment that points the agents at the mock."""
        return {
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.port}",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }


@contextmanager
def mock_anthropic() -> Iterator[MockAnthropic]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield MockAnthropic(server, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
