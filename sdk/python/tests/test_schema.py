"""The SDK's types against api/openapi.yaml, so that they cannot drift from the
gateway silently, and the generated modules against their generators."""

from __future__ import annotations

import importlib.util
import json
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentos_gateway import AgentosError, UnknownEvent, schema
from agentos_gateway._core import (
    Decoder,
    RawEvent,
    decode_exec,
    decode_process,
    decode_session,
    decode_shell,
    decode_vm,
    decode_watch,
)

SDK = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SDK / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


generate_schema = load_script("generate_schema")
unasync = load_script("unasync")
SPEC: dict[str, Any] = generate_schema.load_spec()
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]


def test_schema_py_is_what_the_generator_makes_of_the_spec() -> None:
    want = generate_schema.generate(SPEC)
    assert (SDK / "agentos_gateway" / "schema.py").read_text(encoding="utf-8") == want, (
        "agentos_gateway/schema.py is stale: run scripts/generate_schema.py"
    )


def test_the_sync_client_is_what_unasync_makes_of_the_async_one() -> None:
    source = (SDK / "agentos_gateway" / "_async_client.py").read_text(encoding="utf-8")
    got = (SDK / "agentos_gateway" / "_sync_client.py").read_text(encoding="utf-8")
    assert got == unasync.unasync(source), "_sync_client.py is stale: run scripts/unasync.py"


def typed_dicts() -> list[str]:
    return [n for n in schema.__all__ if typing.is_typeddict(getattr(schema, n))]


@pytest.mark.parametrize("name", typed_dicts())
def test_each_typed_dict_has_the_spec_schemas_fields(name: str) -> None:
    td = getattr(schema, name)
    s = SCHEMAS[name]
    assert set(td.__annotations__) == set(generate_schema.properties(s)), name
    assert set(td.__required_keys__) == generate_schema.required(s), name
    # Every annotation resolves (no name that schema.py does not define).
    typing.get_type_hints(td)


@pytest.mark.parametrize("name", [n for n in schema.__all__ if n not in typed_dicts()])
def test_each_alias_has_the_spec_schemas_values(name: str) -> None:
    s = SCHEMAS[name]
    alias = getattr(schema, name)
    if "enum" in s:
        assert typing.get_args(alias) == tuple(s["enum"])


def test_the_sdk_uses_no_schema_the_spec_lacks() -> None:
    assert set(schema.__all__) <= set(SCHEMAS)


# The SDK's decoder of each event stream of the spec.
DECODERS: dict[tuple[str, str], Decoder[Any]] = {
    ("get", "/v1/vms/{vm}/events"): decode_vm,
    ("post", "/v1/vms/{vm}/exec"): decode_exec,
    ("get", "/v1/vms/{vm}/processes/{pid}/output"): decode_process,
    ("get", "/v1/vms/{vm}/shells/{shell}/output"): decode_shell,
    ("get", "/v1/vms/{vm}/watch"): decode_watch,
    ("get", "/v1/vms/{vm}/sessions/{session}/events"): decode_session,
}


# /mcp's event stream is the Model Context Protocol's (JSON-RPC messages an
# MCP client reads), not one of the gateway's event streams: this SDK is not
# an MCP client, as api/spec_test.go exempts it from the streams' rules.
NOT_THE_GATEWAYS = {"/mcp"}


def streams() -> list[tuple[str, str, str, str]]:
    out = []
    for path, item in SPEC["paths"].items():
        if path in NOT_THE_GATEWAYS:
            continue
        for method, op in item.items():
            if isinstance(op, dict):
                for event, info in op.get("x-sse-events", {}).items():
                    out.append((method, path, event, info["data"].rsplit("/", 1)[1]))
    return out


def test_the_sdk_decodes_every_event_stream_of_the_spec() -> None:
    assert {(m, p) for m, p, _, _ in streams()} == set(DECODERS)


def sample(s: dict[str, Any]) -> Any:
    """A minimal instance of a schema: its required fields, with plain values."""
    if "$ref" in s:
        return sample(SCHEMAS[s["$ref"].rsplit("/", 1)[1]])
    if "enum" in s:
        return s["enum"][0]
    for key in ("oneOf", "anyOf", "allOf"):
        if key in s and not s.get("properties"):
            return sample(s[key][0])
    t = s.get("type")
    if isinstance(t, list):
        t = next(x for x in t if x != "null")
    if t == "object" or "properties" in s:
        props = generate_schema.properties(s)
        return {k: sample(props[k]) for k in generate_schema.required(s)}
    return {"string": "x", "integer": 1, "number": 1.0, "boolean": False, "array": []}.get(t or "", None)


@pytest.mark.parametrize(("method", "path", "event", "data"), streams())
def test_each_event_of_the_spec_decodes_to_a_typed_event(method: str, path: str, event: str, data: str) -> None:
    raw = RawEvent("1", event, json.dumps(sample(SCHEMAS[data])))
    decode = DECODERS[(method, path)]
    if event == "error":
        with pytest.raises(AgentosError):
            decode(raw)
        return
    decoded, _final = decode(raw)
    assert not isinstance(decoded, UnknownEvent), f"{path}: event {event!r} is not decoded"
