"""The SDK's types as a user's program sees them: every ```python example of
the Markdown, and the header types verify_webhook takes, pass mypy --strict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import REPO_ROOT
from .test_readme import EXAMPLES

HEADERS_CHECK = '''
import email.message
import httpx
from agentos_gateway import verify_webhook

def receive(secret: str, message: email.message.Message, headers: httpx.Headers, body: bytes) -> None:
    verify_webhook(secret, {"Agentos-Webhook-Timestamp": "1"}, body)
    verify_webhook(secret, message, body)
    verify_webhook(secret, headers, body)
'''


def test_the_examples_and_the_webhook_headers_pass_mypy_strict(scratch: Path) -> None:
    files = []
    for i, (_, _, code) in enumerate(EXAMPLES):
        files.append(scratch / f"example_{i}.py")
        files[-1].write_text(code, encoding="utf-8")
    files.append(scratch / "headers_check.py")
    files[-1].write_text(HEADERS_CHECK, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(scratch / "cache"),
         *map(str, files)],
        cwd=scratch, env={"MYPYPATH": str(REPO_ROOT / "sdk" / "python"), "PATH": ""},
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
