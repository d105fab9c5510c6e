"""Failed API keys never lock a valid key out, and a forged X-Forwarded-For never resets the limit.

Each test runs the real `convdb serve` (uvicorn included: it used to believe any local peer's
X-Forwarded-For) over a SQLite store, with the run's broker configured.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from convdb.infra.settings import Settings
from tests.api.served import served

KEYS = {"key-acme-0123456789": "acme", "key-umbrella-0123456789": "umbrella"}
ACME, UMBRELLA = "key-acme-0123456789", "key-umbrella-0123456789"
LIMIT = 20  # CONVDB_API__AUTH_FAILURES, the default


def _store(settings: Settings, tmp_path: Path) -> Settings:
    return settings.model_copy(update={"store_url": f"sqlite:///{tmp_path / 'store.db'}"})


def _get(base: str, key: str, forwarded: str | None = None) -> httpx.Response:
    headers = {"X-API-Key": key}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return httpx.get(f"{base}/conversations", headers=headers, timeout=10)


def _guess() -> str:
    """A wrong key with a prefix of its own (so only the address bucket fills)."""
    return uuid.uuid4().hex


def test_wrong_keys_from_one_address_never_lock_a_valid_key_out(settings: Settings, tmp_path: Path) -> None:
    with served(_store(settings, tmp_path), tmp_path, keys=KEYS) as base:
        answers = []
        for _ in range(LIMIT + 10):
            answers.append(_get(base, _guess()).status_code)
            # Every tenant behind the same address (a shared ingress) stays served throughout.
            assert _get(base, ACME).status_code == 200
            assert _get(base, UMBRELLA).status_code == 200
        assert answers == [401] * LIMIT + [429] * 10, answers
        limited = _get(base, _guess())
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        assert "CONVDB_API__AUTH_FAILURES=20" in limited.json()["detail"], limited.text
        # The webhook routes authenticate the same way (their own key header).
        webhook = httpx.post(
            f"{base}/openhands/webhooks/events/{uuid.uuid4().hex}",
            headers={"X-API-Key": ACME},
            content="not json",
            timeout=10,
        )
        assert webhook.status_code == 400, webhook.text  # past authentication, refused for its body


def test_a_rotating_forwarded_for_from_an_untrusted_peer_does_not_reset_the_limit(
    settings: Settings, tmp_path: Path
) -> None:
    with served(_store(settings, tmp_path), tmp_path, keys=KEYS) as base:  # no trusted proxies
        answers = [_get(base, _guess(), f"198.51.100.{i}").status_code for i in range(2 * LIMIT)]
        assert answers == [401] * LIMIT + [429] * LIMIT, answers
        assert _get(base, ACME, "198.51.100.1").status_code == 200


def test_from_a_configured_proxy_the_forwarded_client_is_the_one_counted(
    settings: Settings, tmp_path: Path
) -> None:
    store = _store(settings, tmp_path)
    with served(store, tmp_path, keys=KEYS, trusted_proxies=("127.0.0.0/8",)) as base:
        client, neighbour = "203.0.113.7", "203.0.113.8"
        assert [_get(base, _guess(), client).status_code for _ in range(LIMIT)] == [401] * LIMIT
        assert _get(base, _guess(), client).status_code == 429
        # Another client behind the same proxy has its own count...
        assert _get(base, _guess(), neighbour).status_code == 401
        # ...and the client cannot pass for another one: a proxy appends the address it saw, and
        # the last address that is not a trusted proxy is the one believed.
        assert _get(base, _guess(), f"192.0.2.99, {client}").status_code == 429
        assert _get(base, _guess(), f"{client}, 127.0.0.5").status_code == 429  # two proxies deep
        # A valid key from the throttled client still authenticates.
        assert _get(base, ACME, client).status_code == 200


def test_one_key_prefix_guessed_from_many_addresses_is_limited(settings: Settings, tmp_path: Path) -> None:
    store = _store(settings, tmp_path)
    with served(store, tmp_path, keys=KEYS, trusted_proxies=("127.0.0.1",)) as base:
        # A botnet guessing the rest of a key it knows the start of: one address per guess.
        guesses = [f"key-umbr{uuid.uuid4().hex}" for _ in range(LIMIT + 1)]
        answers = [_get(base, g, f"192.0.2.{i}").status_code for i, g in enumerate(guesses)]
        assert answers == [401] * LIMIT + [429], answers
        limited = _get(base, f"key-umbr{uuid.uuid4().hex}", "192.0.2.200")
        assert limited.status_code == 429 and "keys starting like this one" in limited.json()["detail"]
        assert _get(base, _guess(), "192.0.2.201").status_code == 401  # other prefixes: counted apart
        # The key whose prefix was guessed authenticates, from anywhere.
        assert _get(base, UMBRELLA, "192.0.2.0").status_code == 200
        assert _get(base, UMBRELLA).status_code == 200
