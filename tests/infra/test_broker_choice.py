"""Which broker `dev up` and `demo` start: Apache Kafka where it can run, else the embedded one,
said in one line with what the embedded one lacks (from the capability record)."""

from __future__ import annotations

import shutil
from dataclasses import fields

from convdb.infra.capabilities import APACHE, EMBEDDED
from convdb.infra.dev.choice import apache_missing, choose, describe, embedded_lacks, java_major


def test_auto_picks_apache_exactly_when_it_can_run_here() -> None:
    missing = apache_missing()
    auto = choose("auto")
    assert auto.kind == ("apache" if missing is None else "embedded"), (auto, missing)
    if shutil.which("java") is None:
        assert java_major() is None and missing is not None and "Java 17+" in missing
    else:
        assert java_major() is not None
    assert choose("embedded").kind == "embedded" and choose("apache").kind == "apache"


def test_the_embedded_line_names_every_guarantee_it_lacks() -> None:
    line = describe(choose("embedded"))
    assert line.startswith("broker: the embedded Tansu") and "\n" not in line
    lacking = [
        f.name for f in fields(EMBEDDED) if getattr(APACHE, f.name) is True and not getattr(EMBEDDED, f.name)
    ]
    assert lacking, "the record says the embedded broker lacks nothing"
    for name in lacking:
        assert name.replace("_", " ") in embedded_lacks()
    assert "short session timeouts" not in line  # what Apache Kafka lacks is not listed
