"""A real gateway (and, through it, a real sidecar) for the SDK's tests, started
once per test run as sdk/typescript/test/gateway.mjs does, and stopped after."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from agentos_gateway import Client

REPO_ROOT = Path(__file__).resolve().parents[3]
ADMIN_KEY = "sdk-test-admin-key-0123456789"
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0


@dataclass
class Gateway:
    base_url: str
    api_key: str
    process: subprocess.Popen[bytes]
    _log: list[bytes] = field(default_factory=list)

    def logs(self, tail: int = 4000) -> str:
        return b"".join(self._log).decode("utf-8", "replace")[-tail:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _collect(proc: subprocess.Popen[bytes], sink: list[bytes]) -> None:
    """Keeps the gateway's log, for the messages of failed tests."""
    assert proc.stdout is not None
    for line in proc.stdout:
        sink.append(line)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """A graceful stop disposes the VMs and ends the sidecars (--on-shutdown
    dispose); a gateway that does not stop within 15 s is killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    """Builds the gateway from the checkout (or takes AGENTOS_GATEWAY_BIN), runs it
    on a free port with a data directory of its own, and waits for /readyz."""
    tmp = Path(tempfile.mkdtemp(prefix="agentos-sdk-py-"))
    try:
        binary = os.environ.get("AGENTOS_GATEWAY_BIN")
        if not binary:
            binary = str(tmp / "gw")
            subprocess.run(["go", "build", "-o", binary, "./cmd/server"], cwd=REPO_ROOT,
                           check=True, stdin=subprocess.DEVNULL, timeout=600)
        port = _free_port()
        env = {**os.environ, "AGENTOS_GATEWAY_ADMIN_KEY": ADMIN_KEY, "TMPDIR": str(tmp)}
        # The gateway finds the engine under deps/ from its working directory.
        # Loopback webhook targets are allowed so that a test receives deliveries.
        proc = subprocess.Popen(
            [binary, "--addr", f"127.0.0.1:{port}", "--data-dir", str(tmp / "data"),
             "--shutdown-grace", "5s", "--warm-vms", "1", "--on-shutdown", "dispose",
             "--webhook-allow", "127.0.0.1/32"],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        gw = Gateway(f"http://127.0.0.1:{port}", ADMIN_KEY, proc)
        reader = threading.Thread(target=_collect, args=(proc, gw._log), daemon=True)
        reader.start()
        try:
            _wait_ready(gw)
            yield gw
        finally:
            _stop(proc)
            reader.join(STOP_TIMEOUT)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_ready(gw: Gateway) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if gw.process.poll() is not None:
            raise RuntimeError(f"the gateway exited ({gw.process.returncode}):\n{gw.logs()}")
        try:
            if httpx.get(f"{gw.base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass  # Not listening yet.
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gateway was not ready within {READY_TIMEOUT:.0f} s:\n{gw.logs()}")
        time.sleep(0.2)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A temporary directory that is removed after the test (pytest's tmp_path
    keeps the last runs' directories)."""
    with tempfile.TemporaryDirectory(prefix="agentos-sdk-py-test-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def client(gateway: Gateway) -> Iterator[Client]:
    with Client(gateway.base_url, api_key=gateway.api_key) as c:
        yield c
