#!/usr/bin/env bash
# ensure-tools.sh installs, from Debian's packages, the command-line tools
# the test suite drives (the README walk-through runs with curl and jq) when
# they are missing. It needs root, as the CI machine is.
set -euo pipefail
missing=()
for tool in curl jq; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
# The web console's browser tests drive Debian's Chromium.
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
	echo "ensure-tools: installing ${missing[*]}" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
