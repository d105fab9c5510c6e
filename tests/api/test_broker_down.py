"""While the broker is down, writes fail fast (503) and reads stay fast: a real `convdb serve` whose
broker address has nobody behind it, flooded with concurrent posts."""

from __future__ import annotations

import concurrent.futures
import sys
import time
from pathlib import Path

import httpx

from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from tests.conftest import settings_for

POSTS = 80


def test_reads_stay_fast_while_posts_wait_for_a_broker_that_is_down(tmp_path: Path) -> None:
    port = free_port()
    settings = settings_for(
        None,
        tmp_path / "data",
        bootstrap_servers=f"127.0.0.1:{free_port()}",  # nobody listens there
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        # One tenant may take every write slot here: this is about the broker, not fairness.
        api={
            "keys": {"k": "acme"},
            "publish_concurrency": 4,
            "publish_timeout_s": 5.0,
            "tenant_write_share": 1.0,
        },
        kafka={"delivery_timeout_s": 30.0},
        dev=True,
    )
    env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    log = tmp_path / "api.log"
    proc = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], log, env)
    url, headers = f"http://127.0.0.1:{port}", {"X-API-Key": "k"}
    try:
        wait_for_port(proc, port, 60, "the API", log)

        def post(i: int) -> tuple[int, float]:
            started = time.perf_counter()
            found = httpx.post(
                f"{url}/conversations/c{i}/messages", json={"content": "hi"}, headers=headers, timeout=60
            )
            return found.status_code, time.perf_counter() - started

        with concurrent.futures.ThreadPoolExecutor(POSTS) as pool:
            posts = [pool.submit(post, i) for i in range(POSTS)]
            reads: list[float] = []
            deadline = time.monotonic() + 60
            while any(not p.done() for p in posts) and time.monotonic() < deadline:
                started = time.perf_counter()
                found = httpx.get(f"{url}/conversations", headers=headers, timeout=30)
                reads.append(time.perf_counter() - started)
                assert found.status_code == 200, found.text
            answers = [p.result() for p in posts]
        assert {status for status, _ in answers} == {503}, answers
        assert max(seconds for _, seconds in answers) < 10, answers  # the timeout, not the delivery timeout
        assert len(reads) >= 5, ("too few reads while the posts waited", reads, answers)
        reads.sort()
        # The median and the 90th percentile: one read may lose the CPU to 80 client threads.
        assert reads[len(reads) // 2] < 0.5 and reads[len(reads) * 9 // 10] < 1.0, reads
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    finally:
        stop_group(proc.pid, timeout=10)
        proc.wait(10)
