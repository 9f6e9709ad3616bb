"""The scripted mock of the Anthropic Messages API that the Go tests use
(internal/mockanthropic), run as a process for the agents (claude-code, pi)
that sessions start inside a VM: they reach it over host loopback, offline
and without keys. One mock and one set of reply rules for every language:
``RUN_TOOL:<name>:<json input>`` asks for a tool call, a tool result gets
the done text, anything else the hello text in chunks."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_TIMEOUT = 600.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class MockAnthropic:
    url: str
    port: int
    hello_text: str
    done_text: str
    _env: dict[str, str]

    def env(self) -> dict[str, str]:
        """The session environment that points the agents at the mock."""
        return dict(self._env)


@contextmanager
def mock_anthropic() -> Iterator[MockAnthropic]:
    """Builds and starts the Go mock; it ends when this context does (its
    standard input closes, which also ends it if this process dies)."""
    with tempfile.TemporaryDirectory(prefix="agentos-mock-anthropic-") as tmp:
        binary = str(Path(tmp) / "mockanthropic")
        subprocess.run(["go", "build", "-o", binary, "./internal/mockanthropic/cmd/mockanthropic"],
                       cwd=REPO_ROOT, check=True, stdin=subprocess.DEVNULL, timeout=BUILD_TIMEOUT)
        proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            hello = json.loads(proc.stdout.readline() or b"null")
            if not isinstance(hello, dict):
                raise RuntimeError(f"mockanthropic exited with {proc.wait(STOP_TIMEOUT)} before it listened")
            yield MockAnthropic(url=hello["url"], port=hello["port"], hello_text=hello["helloText"],
                                done_text=hello["doneText"], _env=hello["env"])
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
