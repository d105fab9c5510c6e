"""RESULTS.md sections: a benchmark with a section of its own keeps one per broker.

The orchestration of `python -m bench` is run with its measuring replaced by fixed figures (no
broker is started: what is tested is which section each broker's figures land in).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bench.__main__ as cli
from bench.report import _section, with_section

MAIN = "<!-- bench:small -->\n## `python -m bench --size small`\nmain table\n<!-- /bench:small -->\n"


def test_an_apache_section_sits_beside_the_embedded_one() -> None:
    embedded = with_section(MAIN, "fleet:small", "# t\nembedded figures\n")
    both = with_section(embedded, "fleet:small:apache", "# t\napache figures\n")
    assert "main table" in _section(both, "small")
    assert "embedded figures" in _section(both, "fleet:small")
    apache = _section(both, "fleet:small:apache")
    assert apache.startswith("## `python -m bench --only fleet --size small --broker apache`")
    assert "apache figures" in apache and "embedded" not in apache
    # Writing one broker's section again leaves the other's alone.
    again = with_section(both, "fleet:small", "# t\nnew embedded figures\n")
    assert "apache figures" in _section(again, "fleet:small:apache")
    assert "new embedded figures" in _section(again, "fleet:small")
    with pytest.raises(ValueError, match="no RESULTS.md section"):
        with_section(MAIN, "fleet:small:nowhere", "# t\n")


def test_fleet_on_both_brokers_writes_a_section_for_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text(with_section(MAIN, "fleet:small", "# t\nold embedded figures\n"))
    measured: list[str] = []

    def measure(kind: str, *_: Any) -> tuple[dict[str, float], dict[str, Any], list[str]]:
        measured.append(kind)
        meta = {"fleet_steps_per_s": ("fleet: steps/s", "steps/s", "")}
        return {"fleet_steps_per_s": 1.0 if kind == "embedded" else 2.0}, meta, [f"{kind} note"]

    monkeypatch.setattr(cli, "measure", measure)
    monkeypatch.setattr(cli, "RESULTS", results)
    assert cli.main(["--only", "fleet", "--broker", "both", "--repeats", "1"]) == 0
    assert measured == ["embedded", "apache"]
    text = results.read_text()
    assert "main table" in _section(text, "small")
    embedded, apache = _section(text, "fleet:small"), _section(text, "fleet:small:apache")
    assert "| 1.00 |" in embedded and "embedded note" in embedded and "old" not in embedded
    assert "| 2.00 |" in apache and "apache note" in apache and "--broker apache" in apache
