"""One import name: the distribution installs `convdb` and nothing else at the top level."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("schemas", "projections", "producers", "consumers", "infra")


def test_every_package_folder_is_installed_under_convdb() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {"convdb"} | {
        "convdb." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(config["packages"]) == found
    assert config["package-dir"] == {"convdb": "convdb", **{f"convdb.{f}": f for f in FOLDERS}}


def test_a_users_own_packages_of_the_same_names_never_shadow_convdb(tmp_path: Path) -> None:
    """A user's `schemas` (common in FastAPI apps), `infra`, ... first on sys.path: convdb still
    imports its own, and the user's stay theirs."""
    for name in FOLDERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"USERS_OWN = {name!r}\n")
    program = (
        "import convdb, schemas\n"
        "import convdb.schemas, convdb.infra.cli.main, convdb.consumers.api.app\n"
        "assert schemas.USERS_OWN == 'schemas'\n"
        "assert 'USERS_OWN' not in vars(convdb.schemas)\n"
        "assert convdb.Agent and convdb.Conversation and convdb.Settings and convdb.load_settings\n"
        "print(convdb.__version__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_python_m_convdb_is_the_cli(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "convdb", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "runner" in done.stdout and "demo" in done.stdout
