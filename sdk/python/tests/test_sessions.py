"""An agent session (claude-code in a real VM, talking to a mock of the
Anthropic API on loopback): prompts, the session's events resumed with
Last-Event-ID, and a permission request answered through the SDK."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentos_gateway import AsyncClient, AsyncSessionHandle, SessionUpdate

from .conftest import Gateway
from .mock_anthropic import mock_anthropic

# Bounds the whole scenario: a VM with an agent, its turns (13 s in all
# measured on two shared cores) and the VM's disposal.
SCENARIO_TIMEOUT = 180.0


async def durable_until(session: AsyncSessionHandle, after: int, text: str) -> list[dict[str, Any]]:
    """The durable events after a sequence, up to the first that holds text."""
    seen: list[dict[str, Any]] = []
    async with session.events(after=after) as stream:
        async for ev in stream:
            if isinstance(ev, SessionUpdate) and ev.type == "durable":
                seen.append(ev.data)
                if text in json.dumps(ev.data):
                    return seen
    raise AssertionError(f"the session ended before an event with {text!r}: {seen}")


async def scenario(gateway: Gateway) -> None:
    with mock_anthropic() as mock:
        async with AsyncClient(gateway.base_url, api_key=gateway.api_key) as client:
            created = await client.create_vm(
                {"agents": ["claude"], "loopbackExemptPorts": [mock.port], "labels": {"sdk": "python"}}
            )
            vm = client.vm(created["id"])
            try:
                opened = await vm.open_session(
                    {"agent": "claude", "cwd": "/workspace", "env": mock.env(), "permissionPolicy": "ask"}
                )
                session = vm.session(opened["id"])
                assert [s["id"] async for s in vm.sessions()] == [session.id]

                result = await session.prompt("hello")
                assert result.stop_reason == "end_turn" and not result.replayed
                # Resumed from the start (Last-Event-ID 0): the durable events, in order.
                events = await durable_until(session, 0, mock.hello_text)
                assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
                assert events[0]["type"] == "user_message_chunk"

                # A tool call that needs a permission (a write; claude-code runs
                # read-only commands without asking): the turn waits for the answer.
                latest = (await session.get())["latestSequence"]
                command = {"command": "echo approved > /workspace/approved.txt", "description": "write a file"}
                await session.prompt_async("RUN_TOOL:Bash:" + json.dumps(command))
                asked = await durable_until(session, latest, "permission_request")
                request = asked[-1]
                pending = await session.permissions()
                assert [p["requestId"] for p in pending] == [request["requestId"]]
                allow = next(o["optionId"] for o in request["options"] if o.get("kind") == "allow_once")
                answer = await session.answer_permission(request["requestId"], allow)
                assert answer["status"] == "accepted"
                again = await session.answer_permission(request["requestId"], allow)
                assert again["status"] == "not_pending"
                after = await durable_until(session, request["sequence"], mock.done_text)
                assert "permission_response" in [e["type"] for e in after]
                assert await session.permissions() == []
                # The mock asked for the tool, and the permitted call ran in the VM.
                assert await vm.read_text("/workspace/approved.txt") == "approved\n"

                history = await session.history(after=0, limit=2)
                assert [e["sequence"] for e in history["events"]] == [1, 2] and history["hasMoreAfter"]
                await session.delete()
            finally:
                await vm.delete()


def test_a_session_streams_events_and_asks_for_permissions(gateway: Gateway) -> None:
    asyncio.run(asyncio.wait_for(scenario(gateway), SCENARIO_TIMEOUT))
