#!/usr/bin/env python3
"""Generates agentos_gateway/_sync_client.py from _async_client.py.

The sync Client is the async one with the asyncio taken out, token by token
(as httpcore's unasync does): ``async def`` and ``await`` go, ``async for``
and ``async with`` become ``for`` and ``with``, and the async names become
their sync twins (AsyncClient -> Client, aiter_bytes -> iter_bytes, ...).
Run it after changing _async_client.py; tests/test_schema.py fails while the
generated file is stale.

    /usr/bin/python3 sdk/python/scripts/unasync.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentos_gateway"
SOURCE = PACKAGE / "_async_client.py"
TARGET = PACKAGE / "_sync_client.py"

# Whole-word replacements, in order.
WORDS = [
    ("async def", "def"),
    ("async for", "for"),
    ("async with", "with"),
    ("await", ""),
    ("__aenter__", "__enter__"),
    ("__aexit__", "__exit__"),
    ("__aiter__", "__iter__"),
    ("__anext__", "__next__"),
    ("aclose", "close"),
    ("aread", "read"),
    ("aiter_bytes", "iter_bytes"),
    ("asleep", "sleep"),
    ("StopAsyncIteration", "StopIteration"),
]

HEADER = '''"""The synchronous client of the gateway: Client and the handles of its VMs,
processes, shells, sessions and webhooks.

Generated from _async_client.py by scripts/unasync.py: do not edit.
"""
'''


def unasync(source: str) -> str:
    out = source
    for old, new in WORDS:
        pattern = r"\b" + re.escape(old) + r"\b" + (r" ?" if not new else "")
        out = re.sub(pattern, new, out)
    # AsyncClient -> Client, AsyncIterator -> Iterator, AsyncVMHandle -> VMHandle...
    out = re.sub(r"\bAsync([A-Z]\w*)", r"\1", out)
    # The module's docstring is its own.
    end = out.index('"""', 3) + 3
    return HEADER + out[end:].lstrip("\n").join(["\n", ""])


def main() -> None:
    TARGET.write_text(unasync(SOURCE.read_text(encoding="utf-8")), encoding="utf-8")
    sys.stdout.write(f"wrote {TARGET}\n")


if __name__ == "__main__":
    main()
