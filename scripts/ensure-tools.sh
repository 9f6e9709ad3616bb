#!/usr/bin/env bash
# ensure-tools.sh installs, from Debian's packages, the command-line tools
# the test suite drives (the README walk-through runs with curl and jq), and
# the Python SDK's interpreter packages, when they are missing. It needs
# root, as the CI machine is.
set -euo pipefail
missing=()
for tool in curl jq; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
# The web console's browser tests drive Debian's Chromium.
command -v chromium >/dev/null || missing+=(chromium)
# The Python SDK's tests: Debian's Python 3.11 with the SDK's dependencies
# (httpx, websockets) and its test tools (pytest, mypy, build, yaml).
py_packages=(python3-httpx python3-websockets python3-pytest mypy python3-build python3-yaml python3-setuptools)
for pkg in "${py_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
	echo "ensure-tools: installing ${missing[*]}" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
