"""The redactor's coverage (issue 21's 37 formats and a larger corpus), false positives, JSON validity,
its cost per KB, and a time bound on adversarial inputs as large as the API accepts.

Run with `-s` to see the coverage table and the cost per KB.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator

import pytest

from convdb.infra.secret_patterns import RULES
from convdb.infra.secrets import SecretsRegistry, redact_patterns, triggered_rules
from tests.conftest import settings_for
from tests.infra.secret_samples import EXTRA, FORMATS, ORDINARY, near_misses, openhands_batch

KNOWN_MISSES = {"discord_bot_token", "pgpass_line"}
"""Formats of the larger corpus with nothing to anchor a pattern on (no prefix, no key name)."""

RECORD = settings_for().openhands.max_record_bytes
"""The largest text one `redact` call gets from the API: a webhook body is redacted record by record."""
BODY = settings_for().openhands.max_body_bytes
"""The API's largest body (the webhook's): what one request makes the redactor read in all."""
CEILING = 40
"""Redaction may take this many times a plain scan of the same text (measured worst: ~12; a
superlinear pattern takes thousands of times as long at these sizes)."""
_SCAN = re.compile(r"(?<=[\s\S])\x00\x00")
"""A plain scan: one step of the regex engine at every position of the text, and no match."""


def _redacted(text: str, secret: str) -> bool:
    return secret not in redact_patterns(text)


def test_coverage_of_the_37_formats_and_the_larger_corpus() -> None:
    """The table the closing note quotes: format -> redacted?, for the 37 and the larger corpus."""
    rows = [(corpus, name, _redacted(text, secret)) for corpus, formats in (("37", FORMATS), ("extra", EXTRA))
            for name, (text, secret) in formats.items()]  # fmt: skip
    for corpus, name, hidden in rows:
        print(f"{corpus:5s} {name:34s} {'redacted' if hidden else 'MISSED'}")
    print(f"coverage: {sum(h for c, _, h in rows if c == '37')} of {len(FORMATS)} formats, "
          f"{sum(h for c, _, h in rows if c == 'extra')} of {len(EXTRA)} in the larger corpus")  # fmt: skip
    assert len(FORMATS) == 37
    assert [name for corpus, name, hidden in rows if not hidden] == sorted(KNOWN_MISSES)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_of_the_37_formats_is_redacted_raw_in_json_and_in_json_in_json(name: str) -> None:
    text, secret = FORMATS[name]
    once = json.dumps({"output": text})
    twice = json.dumps({"payload": once})
    assert _redacted(text, secret), redact_patterns(text)
    clean_once = redact_patterns(once)
    assert secret not in json.loads(clean_once)["output"] and "<secret:detected." in clean_once
    clean_twice = json.loads(json.loads(redact_patterns(twice))["payload"])["output"]
    assert secret not in clean_twice, clean_twice


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_the_larger_corpus_is_redacted_but_for_the_known_misses(name: str) -> None:
    text, secret = EXTRA[name]
    assert _redacted(text, secret) is (name not in KNOWN_MISSES)
    json.loads(redact_patterns(json.dumps({"output": text})))


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_text_is_left_exactly_as_it_is(name: str) -> None:
    """Prose, code, references to secrets, UUIDs, digests, base64 of non-secrets, URLs without
    credentials, logs, an OpenHands event: nothing looks like a credential."""
    text = ORDINARY[name]
    assert redact_patterns(text) == text
    assert redact_patterns(json.dumps(text)) == json.dumps(text)


def test_an_openhands_batch_full_of_credentials_stays_valid_json_and_keeps_its_ids() -> None:
    events = json.loads(openhands_batch())
    for event, (text, _) in zip(events, FORMATS.values(), strict=False):
        event["note"] = text
    payload = json.dumps(events)
    registry = SecretsRegistry({"DB": "Xk9m2Qv7"})
    clean = json.loads(registry.redact(payload))
    assert [e["id"] for e in clean] == [e["id"] for e in events]
    assert all("<secret:" in e["note"] for e in clean)
    assert registry.reveal(registry.redact("db Xk9m2Qv7")) == "db Xk9m2Qv7"


def test_triggers_are_literals_so_finding_them_is_one_cheap_pass() -> None:
    """No repetition in a trigger: the automaton of all of them stays a trie (see `Rule.triggers`)."""
    assert all(rule.triggers for rule in RULES)
    assert not [t for rule in RULES for t in rule.triggers if re.search(r"[*+{]", t)]


def test_every_rule_matches_a_sample_so_every_rule_meets_its_near_misses() -> None:
    """The adversarial families are built from the samples: each rule must find one of them."""
    texts = [text for text, _ in (*FORMATS.values(), *EXTRA.values())]
    assert [rule.pattern for rule in RULES if not any(re.search(rule.pattern, t) for t in texts)] == []


def test_a_batch_without_credentials_runs_no_pattern() -> None:
    """The common case stays cheap: one RE2 pass over the text, and no Python pattern at all."""
    assert triggered_rules(openhands_batch()) == ()
    assert redact_patterns(openhands_batch()) == openhands_batch()


def _fill(seed: str, size: int) -> str:
    return (seed * (size // max(1, len(seed)) + 1))[:size]


CRAFTED: dict[str, str] = {
    "jwt_dashes": "eyJ-",
    "jwt_dots": "eyJabcdefgh.",
    "jwt_json_escaped": json.dumps("eyJ-" * 8)[1:-1],
    "pem_headers": "-----BEGIN RSA PRIVATE KEY-----\n",
    "pem_dashes": "-----BEGIN PRIVATE KEY--------",
    "pem_escaped_lines": "-----BEGIN PRIVATE KEY-----\\nMIIE\\n",
    "putty_lines": "Private-Lines: 1\n",
    "base64_key_prefix": "LS0tLS1CRUdJTi",
    "password_equals": "password=",
    "password_colon_quote": 'password:"',
    "token_spaces": "token    ",
    "url_userinfo": "://a:",
    "url_schemes": "a://b:c",
    "llm_prefix": "sk-",
    "aws_prefix": "AKIA",
    "aws_id_then_run": "AKIAQX4BRT7MNOP2WXYZ,",
    "basic_words": "basic ",
    "bearer_words": "Bearer ",
    "user_flag": "-u a:",
    "netrc": "login a password ",
    "twilio_pairs": "AC" + "0" * 32 + ", ",
    "json_escapes": "\\n",
    "sas": "&sig=",
    "slack_hook": "hooks.slack.com/services/",
    "base64_run": "QUFB",
    "hex_run": "0123456789abcdef",
    "word_run": "a",
}
"""Hand-made near-misses: repeated prefixes, runs of the characters a token allows, many triggers."""


def adversarial(size: int) -> Iterator[tuple[str, str]]:
    """For every sample: its lead-in and half its secret repeated, its trigger then a long run of
    token characters, its lead-in alone repeated (a third each); then the hand-made near-misses."""
    for name, (text, secret) in {**FORMATS, **EXTRA}.items():
        start, third = text.index(secret), size // 3
        cut = text[: start + len(secret) // 2]
        yield name, _fill(cut, third) + text[: start + 2] + _fill("aZ9_-", third) + _fill(text[:start], third)
    for name, seed in CRAFTED.items():
        yield name, _fill(seed, size)
    # One assignment whose value is as long as the text, shaped like code (the check reads it whole).
    for name, run in (("snake", "ab_"), ("camel", "aB9"), ("dotted", "ab."), ("upper", "AB_")):
        yield f"assigned_{name}_run", "token=" + _fill(run, size)
    # Hex with `ac` at chosen offsets: every subset of a window's offsets is another state for an
    # automaton counting hex after `ac` (a trigger like `ac[0-9a-f]{32}` thrashed RE2's cache).
    pick = random.Random(21)
    windows = (
        "".join("ac" if pick.random() < 0.5 else "00" for _ in range(17)) for _ in range(size // 34 + 1)
    )
    yield "hex_with_ac_at_chosen_offsets", "".join(windows)[:size]


def _seconds(work: Callable[[str], object], text: str, tries: int = 1) -> float:
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        work(text)
        best = min(best, time.perf_counter() - start)
    return best


def assert_linear(name: str, text: str) -> float:
    """Redacting `text` takes at most `CEILING` times a plain scan of it; returns the ratio."""
    scan = _seconds(_SCAN.search, text, tries=3)
    took = _seconds(redact_patterns, text)
    if took > CEILING * scan:  # a busy machine: measure once more before calling it superlinear
        took = min(took, _seconds(redact_patterns, text))
    assert took <= CEILING * scan, f"{name}: {took:.3f}s to redact {len(text)} characters, scan {scan:.3f}s"
    return took / scan


CASES = dict(adversarial(RECORD))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rule_is_linear_on_adversarial_records(name: str) -> None:
    """Each near-miss family as large as the largest text one redact call gets from the API."""
    assert_linear(name, CASES[name])


@pytest.mark.timeout(300)
def test_a_body_limit_of_every_near_miss_at_once_and_of_the_worst_one() -> None:
    """One request's worth (the webhook body limit): every family in one text, then the costliest alone."""
    segment = BODY // len(CASES)
    mixed = "".join(text[:segment] for text in CASES.values())
    ratios = {"all families": assert_linear("all families", mixed)}
    ratios["password_colon_quote"] = assert_linear(
        "password_colon_quote", _fill(CRAFTED["password_colon_quote"], BODY)
    )
    print({name: round(ratio, 1) for name, ratio in ratios.items()})


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_family_at_the_body_limit() -> None:
    for name, text in adversarial(BODY):
        assert_linear(name, text)


def _ms_per_kb(text: str, repeat: int) -> float:
    redact_patterns(text)
    best = min(_seconds(lambda t: [redact_patterns(t) for _ in range(repeat)], text) for _ in range(3))
    return best / repeat * 1000 / (len(text.encode()) / 1024)


def test_cost_per_kb_is_measured_and_the_common_case_is_cheapest() -> None:
    """The figures the closing note quotes: the common case (a 4 KB webhook batch), ordinary text
    that holds triggers, text full of near-misses, and the costliest adversarial family."""
    batch = openhands_batch()
    ordinary = "\n".join(ORDINARY.values())
    costs = {
        "openhands batch (4 KB, no credential)": _ms_per_kb(batch, 500),
        "ordinary text with triggers (64 KB)": _ms_per_kb(_fill(ordinary + "\n", 65536), 10),
        "near-misses (64 KB)": _ms_per_kb(_fill(near_misses(), 65536), 5),
        "adversarial, costliest family (1 MiB)": _ms_per_kb(
            _fill(CRAFTED["password_colon_quote"], 1 << 20), 1
        ),
    }
    print(f"batch of {len(batch)} bytes: {_seconds(redact_patterns, batch, tries=50) * 1000:.4f} ms")
    for what, cost in costs.items():
        print(f"cost per KB, {what}: {cost:.4f} ms")
    assert costs["openhands batch (4 KB, no credential)"] < costs["near-misses (64 KB)"]
