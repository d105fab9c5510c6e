#!/usr/bin/env bash
# Build the Python 3.11 venv the OpenHands tests drive: the unmodified openhands-sdk,
# openhands-tools and openhands-agent-server 1.58.2 wheels, their dependencies pinned by
# requirements-py311.lock.txt, and oh311shim.py (an import hook that lets the wheels, which
# declare Python >= 3.12, load on 3.11). Usage: build.sh VENV_DIR  (one to two minutes)
# tests/openhands/conftest.py runs it when the cached venv is missing; .ci/run runs it up front.
set -euo pipefail
venv=${1:?usage: build.sh VENV_DIR}
here=$(cd "$(dirname "$0")" && pwd)
version=1.58.2
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r "$here/requirements-py311.lock.txt"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$venv/bin/pip" download -q --no-deps --python-version 3.12 --only-binary=:all: -d "$wheels" \
    "openhands-sdk==$version" "openhands-tools==$version" "openhands-agent-server==$version"
"$venv/bin/pip" install -q --no-deps --ignore-requires-python "$wheels"/*.whl
# What the agent-server imports beyond the SDK's own dependencies.
"$venv/bin/pip" install -q fastapi sqlalchemy aiosqlite alembic docker wsproto
cp "$here/oh311shim.py" "$venv/lib/python3.11/site-packages/oh311shim.py"
echo "openhands venv ready: $venv"
