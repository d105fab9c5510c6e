"""Fixtures for the deployment tests: the deployment checker and the resolved deployment files."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "infra" / "deploy"


@dataclass(frozen=True)
class DeployCheck:
    """The `deploycheck` binary and the Kubernetes schemas it validates against."""

    binary: Path
    schemas: Path
    versions: tuple[str, ...]

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """Run one check; never raises on a non-zero exit (tests look at it)."""
        return subprocess.run(
            [str(self.binary), *map(str, args)], capture_output=True, text=True, timeout=120
        )

    def compose(self, path: Path, env_file: Path, *profiles: str) -> dict[str, Any]:
        """The compose project as `docker compose config` resolves it (fails the test if invalid)."""
        flags = [a for p in profiles for a in ("--profile", p)]
        done = self.run("compose", "--env-file", env_file, *flags, "--print", path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def k8s(self, path: Path, version: str | None = None) -> list[dict[str, Any]]:
        """The rendered Kubernetes resources (fails the test if any is invalid)."""
        version = version or self.versions[-1]
        done = self.run("k8s", "--schemas", self.schemas, "--kubernetes-version", version, "--print", path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def deploycheck() -> DeployCheck:
    """Builds (or reuses) the checker and schema cache with the script CI runs."""
    done = subprocess.run(
        ["bash", str(REPO / "infra" / "scripts" / "deploy-tools.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"infra/scripts/deploy-tools.sh failed:\n{done.stdout}\n{done.stderr}"
    found = dict(shlex.split(line)[0].split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return DeployCheck(
        Path(found["DEPLOYCHECK"]), Path(found["K8S_SCHEMAS"]), tuple(found["K8S_VERSIONS"].split())
    )
