"""`convdb dev schema`: the `.avsc` written from a model is the one the agreement test accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from convdb.infra.cli.main import main
from convdb.infra.dev.avsc import SchemaWriteError, schema_of, write_next
from convdb.schemas import InboxMessage, TitleEvent
from convdb.schemas.catalog import MODELS, shipped_catalog

CATALOG = shipped_catalog()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_schema_written_from_a_model_is_its_latest_shipped_one(name: str) -> None:
    """Field by field, docs, defaults and enum definitions included (the writer and the checked-in
    files agree, so a model change is all a new version needs)."""
    shipped = CATALOG.latest[name].schema
    assert schema_of(MODELS[name], shipped) == shipped
    # From the model alone (a new record type), only Avro ints read as longs may differ.
    assert schema_of(MODELS[name]) == json.loads(json.dumps(shipped).replace('"int"', '"long"'))


def test_nothing_is_written_while_the_model_matches(tmp_path: Path) -> None:
    assert write_next("TitleEvent", tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_a_field_appended_to_a_model_gives_the_next_version() -> None:
    class TitleEventWithScore(TitleEvent):
        """A title generated for the conversation (recorded so replays never call the LLM)."""

        score: float | None = Field(default=None, description="How good the title is.")

    schema = schema_of(TitleEventWithScore)
    assert schema["fields"][:-1] == [{**f} for f in schema_of(TitleEvent)["fields"]], (
        "the shipped fields stay as they are"
    )
    assert schema["fields"][-1] == {
        "name": "score",
        "type": ["null", "double"],
        "doc": "How good the title is.",
        "default": None,
    }


def test_an_enum_grown_in_the_model_is_written_with_its_new_symbol() -> None:
    """InboxMessage v4 added `child_cost_usd` and the `cancel` command: written from v3, the command
    enum keeps v3's symbols in order and appends `cancel` (it once kept v3's enum as shipped)."""
    v3 = next(v for v in CATALOG.versions if v.name == "InboxMessage" and v.version == 3)
    command = next(f for f in schema_of(InboxMessage, v3.schema)["fields"] if f["name"] == "command")
    shipped = next(f for f in v3.schema["fields"] if f["name"] == "command")["type"]
    assert "cancel" not in shipped["symbols"]
    assert command["type"]["symbols"] == [*shipped["symbols"], "cancel"]
    assert schema_of(InboxMessage, v3.schema) == CATALOG.latest["InboxMessage"].schema


def test_an_unknown_record_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SchemaWriteError, match="no record model named"):
        write_next("NoSuchEvent")
    with pytest.raises(SystemExit) as exit_info:
        main(["dev", "schema", "NoSuchEvent"])
    assert exit_info.value.code == 2
    assert "no record model named 'NoSuchEvent'" in capsys.readouterr().err


def test_the_command_says_when_the_model_matches(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["dev", "schema", "MessageEvent", "--dir", str(tmp_path)]) == 0
    assert "MessageEvent: the latest shipped schema matches the model" in capsys.readouterr().out
    assert json.loads(json.dumps(CATALOG.latest["MessageEvent"].schema))  # still the shipped one
