"""Every ```python example of the Markdown that shows the SDK runs as pasted,
against the real gateway, as sdk/typescript/test/readme.test.mjs does for the
TypeScript ones: each in a Python of its own that imports agentos_gateway as
a user's program would, with AGENTOS_URL and AGENTOS_API_KEY set. An example
fails when it raises or has not ended within its time; together they fail
when they leave a VM behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentos_gateway import Client

from .conftest import REPO_ROOT, Gateway

SOURCES = ["README.md", "docs/clients.md", "sdk/python/README.md"]
EXAMPLE_TIMEOUT = 120
FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(source: str) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown file, with the line each starts on."""
    text = (REPO_ROOT / source).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


EXAMPLES = [(source, line, code) for source in SOURCES for line, code in python_blocks(source)]


@pytest.mark.parametrize("source", SOURCES)
def test_the_markdown_has_python_examples(source: str) -> None:
    assert python_blocks(source), f"no ```python block in {source}"


@pytest.mark.parametrize(("source", "line", "code"), EXAMPLES,
                         ids=[f"{s}:{n}" for s, n, _ in EXAMPLES])
def test_the_example_runs(gateway: Gateway, scratch: Path, source: str, line: int, code: str) -> None:
    script = scratch / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO_ROOT / "sdk" / "python"),
        "AGENTOS_URL": gateway.base_url,
        "AGENTOS_API_KEY": gateway.api_key,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    try:
        run = subprocess.run([sys.executable, str(script)], cwd=scratch, env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=EXAMPLE_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{source}:{line} had not ended after {EXAMPLE_TIMEOUT} s\n"
                    f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}\nthe gateway:\n{gateway.logs()}")
    assert run.returncode == 0, (
        f"{source}:{line} failed (exit {run.returncode})\nstdout:\n{run.stdout}\n"
        f"stderr:\n{run.stderr}\nthe gateway:\n{gateway.logs()}"
    )


def test_the_examples_delete_the_vms_they_create(gateway: Gateway) -> None:
    # Runs after the examples (pytest keeps the order of a module's tests); the
    # other modules' VMs carry the label sdk=python or are deleted by their tests.
    with Client(gateway.base_url, api_key=gateway.api_key) as c:
        left = [v["id"] for v in c.vms() if v["labels"].get("sdk") != "python"]
    assert left == []
