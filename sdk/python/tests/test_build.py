"""The distribution: `python3 -m build --no-isolation --wheel` makes a wheel,
offline, that holds the package and declares its dependencies."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]


def test_the_wheel_builds_offline_with_the_package_and_its_dependencies(scratch: Path) -> None:
    # The tree stays clean: the build works in a copy.
    src = scratch / "src"
    shutil.copytree(SDK, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".pytest_cache"))
    out = scratch / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(out), str(src)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    wheels = list(out.glob("agentos_gateway-*-py3-none-any.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(whl.read(meta).decode())
    for module in ("__init__", "_async_client", "_sync_client", "_attach", "_core", "errors",
                   "schema", "types", "webhook"):
        assert f"agentos_gateway/{module}.py" in names
    assert "agentos_gateway/py.typed" in names
    assert not any(n.startswith("tests/") for n in names)
    assert metadata["Name"] == "agentos-gateway"
    assert metadata["Requires-Python"] == ">=3.11"
    requires = sorted(re.sub(r"[\s()]", "", r) for r in metadata.get_all("Requires-Dist", []))
    assert requires == ["httpx>=0.23", "websockets>=10.4"]
