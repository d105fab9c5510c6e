#!/usr/bin/env bash
# Type-check convdb as it is installed: mypy cannot follow the editable install's import finder
# (the `convdb.<package>` names map to the repository's top-level folders), so the package is
# installed (without dependencies) into a scratch folder and checked from outside the checkout,
# with the venv's third-party packages. Strictness per package is in pyproject's [tool.mypy].
# Usage: bash infra/scripts/typecheck.sh   (from the repository root, after the set-up)
set -euo pipefail
repo=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# A copy of what the wheel holds, so that the build leaves nothing in the checkout.
mkdir "$scratch/src"
cp -r pyproject.toml README.md convdb schemas projections producers consumers infra "$scratch/src/"
"$repo/.venv/bin/pip" install -q --no-deps --target "$scratch/site" "$scratch/src" 2>&1 | grep -v '_BetaConfiguration\|warnings.warn' || true
cd "$scratch"
MYPYPATH="$scratch/site" "$repo/.venv/bin/mypy" --config-file "$repo/pyproject.toml" -p convdb
