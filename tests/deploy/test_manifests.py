"""The deployment files are valid for their tools, refuse broken variants, and agree with the code."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.cli.main import build_parser
from convdb.infra.settings import Settings
from tests.deploy.conftest import DEPLOY, DeployCheck

COMPOSE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
K8S = DEPLOY / "k8s"
CONVDB_IMAGE = "convdb:"
DATA_STORES = ("kafka", "postgres", "minio")


def dockerfile_uid() -> int:
    """The fixed uid the image runs as (ARG UID=...)."""
    found = re.search(r"^ARG UID=(\d+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert found, "the Dockerfile declares no fixed UID"
    return int(found.group(1))


def unknown_settings(env: dict[str, str]) -> list[str]:
    """CONVDB_* names that no Settings field reads (pydantic-settings ignores them silently)."""
    unknown = []
    for name in env:
        if not name.startswith("CONVDB_"):
            continue
        top, _, nested = name.removeprefix("CONVDB_").lower().partition("__")
        field = Settings.model_fields.get(top)
        section = getattr(field.annotation, "model_fields", None) if field else None
        if field is None or (nested and (section is None or nested not in section)):
            unknown.append(name)
    return unknown


def parses_as_cli(argv: list[str]) -> bool:
    """True when `convdb ARGV` is a valid command line."""
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        return False
    return True


# -- valid as their tools read them -------------------------------------------------------------


def test_dockerfile_passes_buildkit_checks(deploycheck: DeployCheck) -> None:
    done = deploycheck.run("dockerfile", DEPLOY / "Dockerfile")
    assert done.returncode == 0, done.stderr


def test_compose_resolves_with_every_profile(deploycheck: DeployCheck) -> None:
    project = deploycheck.compose(COMPOSE, ENV_EXAMPLE, "*")
    assert {"kafka", "kafka-2", "kafka-3", "tracker", "init", "runner", "api"} <= set(project["services"])


def test_kubernetes_manifests_match_the_schemas(deploycheck: DeployCheck) -> None:
    for version in deploycheck.versions:
        kinds = sorted({r["kind"] for r in deploycheck.k8s(K8S, version)})
        assert kinds == ["ConfigMap", "Deployment", "Job", "PodDisruptionBudget", "Service", "StatefulSet"]


# -- the validators refuse broken files --------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "old", "new", "reason"),
    [
        ("runner.yaml", "livenessProbe:", "livenessProbes:", "additional properties 'livenessProbes'"),
        ("api.yaml", "replicas: 2", "replicas: two", "/spec/replicas"),
        ("read-side.yaml", "maxUnavailable: 1", "maxUnavailable: [1]", "maxUnavailable"),
        ("config.yaml", 'CONVDB_PARTITIONS: "12"', "CONVDB_PARTITIONS: 12", "CONVDB_PARTITIONS"),
    ],
)
def test_broken_kubernetes_manifest_is_refused(
    deploycheck: DeployCheck, tmp_path: Path, file: str, old: str, new: str, reason: str
) -> None:
    broken = tmp_path / "k8s"
    shutil.copytree(K8S, broken)
    text = (broken / file).read_text()
    assert old in text
    (broken / file).write_text(text.replace(old, new, 1))
    done = deploycheck.run("k8s", "--schemas", deploycheck.schemas, broken)
    assert done.returncode == 1 and reason in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("service_completed_successfully", "service_done", "must be one of"),
        ("healthcheck: {disable: true}", "healthcheck: {disabled: true}", "'disabled' not allowed"),
        ("deploy: {replicas: 2}", "deploy: {replicas: -2}", "replicas: must be greater than or equal to 0"),
        ("  init:\n", "  init-job:\n", 'undefined service "init"'),
    ],
)
def test_broken_compose_file_is_refused(
    deploycheck: DeployCheck, tmp_path: Path, old: str, new: str, reason: str
) -> None:
    text = COMPOSE.read_text()
    assert old in text
    broken = tmp_path / "compose.yaml"
    broken.write_text(text.replace(old, new, 1))
    done = deploycheck.run("compose", "--env-file", ENV_EXAMPLE, broken)
    assert done.returncode == 1 and reason in done.stderr, done.stderr


def test_compose_without_secrets_is_refused(deploycheck: DeployCheck, tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    done = deploycheck.run("compose", "--env-file", empty, COMPOSE)
    assert done.returncode == 1 and "set POSTGRES_PASSWORD in infra/deploy/.env" in done.stderr


def test_broken_dockerfile_is_refused(deploycheck: DeployCheck, tmp_path: Path) -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace('ENTRYPOINT ["convdb"]', "ENTRYPOINT convdb"))
    done = deploycheck.run("dockerfile", broken)
    assert done.returncode == 1 and "JSONArgsRecommended" in done.stderr, done.stderr


# -- the files agree with the code and with each other ------------------------------------------


def convdb_services(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services that run the convdb image."""
    return {n: s for n, s in project["services"].items() if s.get("image", "").startswith(CONVDB_IMAGE)}


def test_compose_services_run_real_commands_with_known_settings(deploycheck: DeployCheck) -> None:
    services = convdb_services(deploycheck.compose(COMPOSE, ENV_EXAMPLE, "*"))
    assert {"init", "read-side", "archive", "reconciler", "runner", "api", "tracker"} == set(services)
    for name, service in services.items():
        if service.get("entrypoint") is None:
            assert parses_as_cli(service["command"]), f"{name}: `convdb {' '.join(service['command'])}`"
        assert unknown_settings(service.get("environment", {})) == [], name


def test_compose_keeps_data_and_waits_for_health(deploycheck: DeployCheck) -> None:
    project = deploycheck.compose(COMPOSE, ENV_EXAMPLE, "*")
    services = project["services"]
    for name in (*DATA_STORES, "kafka-2", "kafka-3"):
        volumes = services[name].get("volumes", [])
        assert any(v["type"] == "volume" for v in volumes), f"{name} keeps no volume"
        assert services[name]["healthcheck"]["test"], f"{name} has no health check"
    assert services["init"]["command"] == ["init"]
    for name, service in convdb_services(project).items():
        if name in ("init", "tracker"):
            continue
        needs = service["depends_on"]
        assert needs["init"]["condition"] == "service_completed_successfully", name
        assert needs["kafka"]["condition"] == needs["postgres"]["condition"] == "service_healthy", name
        assert needs["kafka-2"]["required"] is False, name


def test_compose_ships_only_refused_sample_secrets(
    deploycheck: DeployCheck, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = deploycheck.compose(COMPOSE, ENV_EXAMPLE)["services"]["api"]["environment"]
    for name in [n for n in os.environ if n.startswith("CONVDB_")]:
        monkeypatch.delenv(name)
    for name, value in api.items():
        monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    found = settings.sample_credentials()
    assert len(found) == 5 and "CONVDB_API__SESSION_SECRET" in found and not settings.dev_mode, found


def test_the_production_overlay_builds_and_sets_what_production_needs(deploycheck: DeployCheck) -> None:
    resources = deploycheck.k8s(K8S.parent / "k8s-production")
    by_kind = {(r["kind"], r["metadata"]["name"]): r for r in resources}
    config = by_kind[("ConfigMap", "convdb-config")]["data"]
    assert unknown_settings(config) == []
    assert config["CONVDB_REPLICATION_FACTOR"] == "3" and config["CONVDB_API__TRUSTED_PROXIES"] != "[]"
    assert by_kind[("Deployment", "convdb-api")]["spec"]["replicas"] > 1
    ingress = by_kind[("Ingress", "convdb-api")]["spec"]
    assert ingress["tls"][0]["secretName"] == "convdb-tls"
    # More than one API replica: the session secret is among the keys the Secret example holds.
    example = (K8S / "secrets.env.example").read_text()
    assert "CONVDB_API__SESSION_SECRET=" in example


def test_kubernetes_deployments_are_operable(deploycheck: DeployCheck) -> None:
    resources = deploycheck.k8s(K8S)
    deployments = [r for r in resources if r["kind"] in ("Deployment", "StatefulSet")]
    budgets = {
        r["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for r in resources
        if r["kind"] == "PodDisruptionBudget"
    }
    config = next(r for r in resources if r["kind"] == "ConfigMap")
    assert unknown_settings(config["data"]) == []
    assert {d["metadata"]["name"] for d in deployments} == {
        "convdb-runner", "convdb-read-side", "convdb-archive", "convdb-reconciler", "convdb-api"
    }  # fmt: skip
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        assert name in budgets, f"{name} has no PodDisruptionBudget"
        assert pod["securityContext"]["runAsUser"] == dockerfile_uid(), name
        assert pod["terminationGracePeriodSeconds"] >= 30, name
        (container,) = pod["containers"]
        assert parses_as_cli(container["args"]), f"{name}: convdb {container['args']}"
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz", f"{name} {probe}"
        assert set(container["resources"]) == {"requests", "limits"}, name
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
    runner = next(d for d in deployments if d["metadata"]["name"] == "convdb-runner")
    (container,) = runner["spec"]["template"]["spec"]["containers"]
    # Static membership: each runner is named after its StatefulSet pod (stable across restarts).
    assert runner["kind"] == "StatefulSet" and {"name": "CONVDB_RUNTIME__INSTANCE_ID",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]  # fmt: skip


def test_compose_runs_the_kafka_version_the_tests_prove(deploycheck: DeployCheck) -> None:
    from convdb.infra.dev.kafka_jars import KAFKA_VERSION

    services = deploycheck.compose(COMPOSE, ENV_EXAMPLE, "*")["services"]
    for name in ("kafka", "kafka-2", "kafka-3"):
        assert services[name]["image"] == f"apache/kafka:{KAFKA_VERSION}", name
