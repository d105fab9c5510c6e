"""`python -m bench.secret_detectors`: convdb's redactor against detect-secrets, on the same samples.

Coverage of issue 21's 37 formats and of the 44-format corpus (`tests/infra/secret_samples.py`),
false positives on its ordinary texts, and cost per KB on ordinary text, on text full of
near-misses and on adversarial inputs. detect-secrets is not a dependency: install it beside
convdb to compare (`pip install detect-secrets`); without it only convdb is measured.

detect-secrets is a detector, not a redactor: it reports the lines that hold a suspect and a value
for its baseline, and that value is often not the credential's span (`ghp` for a GitHub token, the
`BEGIN RSA PRIVATE KEY` header for a key, a JWT without its signature); here each reported value
is replaced in the text, as a redactor built on it would do (hiding whole lines instead would
hide a whole webhook payload, which is one line of JSON). Measured on the development machine
(2 cores, shared) with detect-secrets 1.5.0 and its default plugins, scanning as `detect-secrets
scan` does (`scan_file`), and ad hoc (`scan_line`, which takes every word as a candidate):

| detector | 37 formats | 44 more | ordinary texts changed | ms/KB ordinary | ms/KB near-miss | `eyJ-`*12.5k |
| --- | --- | --- | --- | --- | --- | --- |
| convdb (infra/secret_patterns.py) | 37 | 42 | 0 of 8 | 0.07-0.12 | 0.21-0.43 | < 1 ms |
| detect-secrets, file scan | 14 | 8 | 0 of 8 | 4.2 | 4.4 | 0.59 s |
| detect-secrets, ad hoc scan | 35 | 43 | 8 of 8 | 9.4 | 9.2 | 0.57 s |

Ad hoc, its entropy plugins report nearly every word (so nearly everything is "found", and every
ordinary text is mangled); as it scans files it finds 14 of the 37. It costs 35 to 120 times as
much per KB, and its JWT pattern is superlinear too.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.infra.secret_samples import EXTRA, FORMATS, ORDINARY, near_misses

Redactor = Callable[[str], str]


def detect_secrets_redactor(ad_hoc: bool = False) -> Redactor | None:
    """detect-secrets' plugins as a redactor (every reported value replaced), if it is installed."""
    try:
        from detect_secrets.core.scan import scan_file, scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    folder = Path(tempfile.mkdtemp(prefix="detect-secrets-"))

    def redact(text: str) -> str:
        with default_settings():
            if ad_hoc:
                found = {s.secret_value for line in text.splitlines() for s in scan_line(line)}
            else:
                (folder / "text.txt").write_text(text)
                found = {s.secret_value for s in scan_file(str(folder / "text.txt"))}
        for value in sorted((v for v in found if v), key=len, reverse=True):
            text = text.replace(value, "<secret:detected>")
        return text

    return redact


def _ms_per_kb(redact: Redactor, text: str, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        redact(text)
        best = min(best, time.perf_counter() - start)
    return best * 1000 / (len(text.encode()) / 1024)


def measure(redact: Redactor) -> dict[str, object]:
    """Coverage, false positives and cost per KB of one redactor."""
    ordinary = "\n".join(ORDINARY.values())
    jwt = "eyJ-" * 12_500
    return {
        "37 formats": sum(secret not in redact(text) for text, secret in FORMATS.values()),
        "44 more": sum(secret not in redact(text) for text, secret in EXTRA.values()),
        "ordinary changed": sum(redact(text) != text for text in ORDINARY.values()),
        "ms/KB ordinary": round(_ms_per_kb(redact, (ordinary + "\n") * 40), 3),
        "ms/KB near-miss": round(_ms_per_kb(redact, near_misses() * 10), 3),
        "eyJ- s": round(_ms_per_kb(redact, jwt, tries=1) * len(jwt) / 1024 / 1000, 4),
    }


def main() -> None:
    from convdb.infra.secrets import redact_patterns

    candidates: dict[str, Redactor | None] = {
        "convdb": redact_patterns,
        "detect-secrets, file scan": detect_secrets_redactor(),
        "detect-secrets, ad hoc scan": detect_secrets_redactor(ad_hoc=True),
    }
    for name, redact in candidates.items():
        print(name, measure(redact) if redact else "not installed (pip install detect-secrets)")


if __name__ == "__main__":
    main()
