#!/usr/bin/env python3
"""Generates agentos_gateway/schema.py from the gateway's api/openapi.yaml.

Every schema the SDK reads or sends (SCHEMAS) becomes a TypedDict whose keys
are the spec's properties, the required ones plain and the rest NotRequired;
enums become Literal types. Run it after the spec changes:

    /usr/bin/python3 sdk/python/scripts/generate_schema.py

tests/test_schema.py fails while schema.py is not what this script makes of
the spec, and checks the TypedDicts against the spec on their own.
"""

from __future__ import annotations

import json
import keyword
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SPEC = HERE.parents[2] / "api" / "openapi.yaml"
OUT = HERE.parent / "agentos_gateway" / "schema.py"

# The spec's schemas the SDK uses, as TypedDicts or type aliases.
SCHEMAS = [
    "Problem", "ErrorCode", "VMState",
    "VM", "CreateVMRequest", "UpdateVMRequest", "VMUsage", "VMEvent",
    "ExecRequest", "ExecResult", "SpawnRequest", "ExitStatus", "ProcessInfo",
    "OpenShellRequest", "Shell", "ShellCreated", "AttachServerFrame",
    "FileWritten", "ArchiveExtracted", "Stat", "DirEntry",
    "OpenSessionRequest", "Session", "SessionState", "Permission", "PermissionOption",
    "PermissionDecision", "PermissionAnswer", "SessionConfig", "SessionHistory",
    "ContentBlock", "PromptRequest", "PromptResult", "CancelResult",
    "CreatePreviewRequest", "Preview",
    "CreateScheduleRequest", "Schedule", "ScheduleAction", "ScheduleExec", "SchedulePrompt",
    "OverlapPolicy", "ScheduleRun",
    "Snapshot", "Forked",
    "CreateTokenRequest", "Token", "CreatedToken", "Me",
    "CreateWebhookRequest", "UpdateWebhookRequest", "WebhookEventName", "Webhook", "Delivery",
    "WebhookSecret", "WebhookEvent",
    "OutputEvent", "ProcessExitEvent", "ExecExitEvent", "GapEvent", "LostEvent", "WatchEvent",
    "WatchResyncEvent", "ErrorEvent", "SessionEvent", "EphemeralEvent", "AgentStderrEvent",
    "AgentExitEvent", "OverflowEvent", "SessionEndEvent",
]

PRIMITIVES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def load_spec(path: Path = SPEC) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        spec: dict[str, Any] = yaml.safe_load(f)
    return spec


def properties(schema: dict[str, Any]) -> dict[str, Any]:
    """The properties of an object schema, those of its oneOf branches merged in."""
    props: dict[str, Any] = dict(schema.get("properties", {}))
    for branch in schema.get("oneOf", []):
        for name, sub in branch.get("properties", {}).items():
            props.setdefault(name, sub)
    for part in schema.get("allOf", []):
        props.update(part.get("properties", {}))
    return props


def required(schema: dict[str, Any]) -> set[str]:
    """The properties every instance has (a oneOf branch's required ones are not)."""
    req = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        req |= set(part.get("required", []))
    return req


def is_object(schema: dict[str, Any]) -> bool:
    return bool(properties(schema)) and "enum" not in schema


class Generator:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = spec["components"]["schemas"]

    def type_of(self, s: dict[str, Any]) -> str:
        """The Python annotation of a property's schema."""
        if "$ref" in s:
            name = s["$ref"].rsplit("/", 1)[1]
            if name in SCHEMAS:
                return name
            return self.type_of(self.schemas[name])
        for combinator in ("oneOf", "anyOf"):
            if combinator in s and not s.get("properties"):
                return self.union([self.type_of(b) for b in s[combinator]])
        if "allOf" in s and len(s["allOf"]) == 1 and not s.get("properties"):
            return self.type_of(s["allOf"][0])
        if "const" in s:
            return f"Literal[{json.dumps(s['const'])}]"
        if "enum" in s:
            return "Literal[" + ", ".join(json.dumps(v) for v in s["enum"]) + "]"
        t = s.get("type")
        if isinstance(t, list):
            return self.union([self.type_of({**s, "type": one}) for one in t])
        if t == "null":
            return "None"
        if t in PRIMITIVES:
            return PRIMITIVES[t]
        if t == "array":
            return f"list[{self.type_of(s.get('items', {}))}]"
        if t == "object" or "properties" in s or "additionalProperties" in s:
            extra = s.get("additionalProperties")
            if isinstance(extra, dict) and not s.get("properties"):
                return f"dict[str, {self.type_of(extra)}]"
            return "dict[str, Any]"
        return "Any"

    @staticmethod
    def union(types: list[str]) -> str:
        out: list[str] = []
        for t in types:
            if t not in out:
                out.append(t)
        if "Any" in out:
            return "Any"
        return " | ".join(out)

    def emit(self, name: str) -> str:
        s = self.schemas[name]
        doc = docstring(s.get("description", ""))
        if not is_object(s):
            t = self.type_of(s)
            if len(name) + len(t) > 90 and t.startswith("Literal["):
                t = "Literal[\n" + "".join(f"    {v},\n" for v in t[8:-1].split(", ")) + "]"
            alias = f"{name} = {t}"
            return (comment(s["description"]) + "\n" if "description" in s else "") + alias
        req = required(s)
        fields = []
        for prop, sub in properties(s).items():
            t = self.type_of(sub)
            fields.append((prop, t if prop in req else f"NotRequired[{t}]"))
        if any(keyword.iskeyword(p) for p, _ in fields):
            # A key such as "from" cannot be a class attribute.
            body = "".join(f"\n        {json.dumps(p)}: {t}," for p, t in fields)
            out = f'{name} = TypedDict(\n    "{name}",\n    {{{body}\n    }},\n)'
            return (comment(s["description"]) + "\n" if "description" in s else "") + out
        lines = [f"class {name}(TypedDict):"]
        if doc:
            lines.append(doc)
        lines += [f"    {p}: {t}" for p, t in fields]
        return "\n".join(lines)

    def refs(self, s: Any) -> list[str]:
        """The schemas of SCHEMAS that schema s names, in order."""
        out: list[str] = []
        if isinstance(s, dict):
            ref = s.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[1]
                out += [name] if name in SCHEMAS else self.refs(self.schemas[name])
            for v in s.values():
                out += self.refs(v)
        elif isinstance(s, list):
            for v in s:
                out += self.refs(v)
        return out

    def ordered(self) -> list[str]:
        """SCHEMAS with each after the ones it names: TypedDicts are evaluated at
        once (postponed annotations would hide NotRequired from them)."""
        done: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in path:
                raise ValueError(f"schemas refer to each other: {' -> '.join(path + (name,))}")
            for dep in self.refs(self.schemas[name]):
                visit(dep, path + (name,))
            done.append(name)

        for name in SCHEMAS:
            visit(name, ())
        return done

    def module(self) -> str:
        head = (
            '"""The gateway\'s wire types, generated from api/openapi.yaml by\n'
            "scripts/generate_schema.py: do not edit.\n\n"
            "Each is a TypedDict whose keys are the JSON fields as the spec names them.\n"
            '"""\n\n'
            "from typing import Any, Literal, NotRequired, TypedDict\n\n"
            "__all__ = [\n" + "".join(f'    "{n}",\n' for n in SCHEMAS) + "]\n"
        )
        return head + "".join(f"\n\n{self.emit(n)}\n" for n in self.ordered())


def first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def docstring(text: str) -> str:
    if not text.strip():
        return ""
    para = first_paragraph(text).replace("\\", "\\\\").replace('"""', "'''")
    wrapped = textwrap.wrap(para, width=84)
    if len(wrapped) == 1:
        return f'    """{wrapped[0]}"""\n'
    return '    """' + "\n    ".join(wrapped) + '\n    """\n'


def comment(text: str) -> str:
    return "\n".join("# " + line for line in textwrap.wrap(first_paragraph(text), width=86))


def generate(spec: dict[str, Any] | None = None) -> str:
    return Generator(spec if spec is not None else load_spec()).module()


if __name__ == "__main__":
    OUT.write_text(generate(), encoding="utf-8")
    sys.stdout.write(f"wrote {OUT}\n")
