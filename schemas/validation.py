"""The one validation layer for identifiers and texts (DESIGN §11), at every entry point and on read.

The rules, written once:
- an identifier (`id`, `conversation_id`, `tenant_id`, `parent_id`, the ids an event refers to)
  is 1 to `MAX_ID` characters, all printable: no control or format characters, no line
  separators, no surrogates. A conversation id has no `/` (it separates an operation id,
  `{conversation_id}/{action_id}`, and URL path segments);
- a text (message, observation, thought, result, JSON payload) holds no NUL character and no
  lone surrogate: PostgreSQL cannot store the one, UTF-8 cannot encode the other.

Entry points (API, CLI, webhooks) refuse input that breaks them, with a message; the codec
checks every record it encodes and every record it decodes, so a record of an older or
foreign producer that breaks them is a data error (DLQ), never a store failure that is
retried forever. `check_record` runs on every consumed record: it is written to be cheap
(`str.isprintable` and `in`, both in C; `bench/validation.py` measures it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from convdb.schemas._types import AvroModel
from convdb.schemas.errors import InvalidRecordError, InvalidValueError

MAX_ID = 200
"""Longest identifier, in characters (the stores' id columns; OpenHands ids fit)."""
MAX_OPERATION_ID = 2 * MAX_ID + 1
"""Longest operation id: `{conversation_id}/{action_id}`."""
MAX_SHOWN = 80
"""Characters of a refused value that an error message repeats."""
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1
"""Integers convdb stores are Avro longs and 64-bit store columns."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in foreign JSON (webhooks, imports): deeper
values cannot be walked, compared or encoded without exhausting Python's recursion limit."""

ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
"""The identifier rule as an OpenAPI pattern (the printable check is stricter; the length is separate)."""
CONVERSATION_ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f/]+$"
"""The conversation-id rule as an OpenAPI pattern."""

ID_FIELDS = frozenset(
    {
        "id",
        "conversation_id",
        "tenant_id",
        "parent_id",
        "action_id",
        "active_leaf_id",
        "last_event_id",
        "leaf_event_id",
        "source_conversation_id",
        "source_event_id",
        "parent_conversation_id",
        "child_conversation_id",
        "forgotten_event_ids",
        "path_ids",
    }
)
"""Record fields that hold identifiers (or tuples of them); every other text field is a text."""
OPERATION_FIELDS = frozenset({"operation_id", "open_operations", "parent_operation_id"})
"""Record fields that hold operation ids."""


def shown(value: object) -> str:
    """A refused value as an error message may repeat it: bounded and escaped."""
    text = value if isinstance(value, str) else repr(value)
    cut = text[:MAX_SHOWN]
    return repr(cut) + (f" (+{len(text) - MAX_SHOWN} more characters)" if len(text) > MAX_SHOWN else "")


def id_problem(value: object, max_length: int = MAX_ID) -> str | None:
    """Why `value` is not a valid identifier, or None."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > max_length:
        return f"has {len(value)} characters; at most {max_length} are allowed"
    if not value.isprintable():
        return "holds a control, format or separator character"
    return None


def conversation_id_problem(value: object) -> str | None:
    """Why `value` is not a valid conversation id, or None."""
    problem = id_problem(value)
    if problem is None and "/" in value:  # type: ignore[operator]
        return "holds '/' (it separates the parts of an operation id)"
    return problem


def text_problem(value: object) -> str | None:
    """Why `value` is not a valid text, or None."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if "\x00" in value:
        return "holds a NUL character"
    try:
        value.encode()
    except UnicodeEncodeError:
        return "holds a lone surrogate (not valid Unicode)"
    return None


def check_id(value: object, what: str = "id", max_length: int = MAX_ID) -> str:
    """`value` if it is a valid identifier.

    Raises:
        InvalidValueError: it is not (the message names `what` and shows the value, bounded).
    """
    problem = id_problem(value, max_length)
    if problem is not None:
        raise InvalidValueError(f"{what} {shown(value)} {problem}")
    return value  # type: ignore[return-value]


def check_conversation_id(value: object, what: str = "conversation_id") -> str:
    """`value` if it is a valid conversation id. Raises `InvalidValueError`."""
    problem = conversation_id_problem(value)
    if problem is not None:
        raise InvalidValueError(f"{what} {shown(value)} {problem}")
    return value  # type: ignore[return-value]


def check_operation_id(value: object, what: str = "operation_id") -> str:
    """`value` if it is `{conversation_id}/{action_id}` with valid parts. Raises `InvalidValueError`."""
    check_id(value, what, MAX_OPERATION_ID)
    conversation_id, sep, action_id = str(value).rpartition("/")
    if not sep or conversation_id_problem(conversation_id) or id_problem(action_id):
        raise InvalidValueError(f"{what} {shown(value)} is not '<conversation_id>/<action_id>'")
    return value  # type: ignore[return-value]


def check_text(value: object, what: str = "text", max_length: int | None = None) -> str:
    """`value` if it is a valid text (of at most `max_length` characters). Raises `InvalidValueError`."""
    problem = text_problem(value)
    if problem is None and max_length is not None and len(value) > max_length:  # type: ignore[arg-type]
        problem = f"has {len(value)} characters; at most {max_length} are allowed"  # type: ignore[arg-type]
    if problem is not None:
        raise InvalidValueError(f"{what} {problem}")
    return value  # type: ignore[return-value]


def json_problem(value: object, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a parsed JSON value cannot be stored, or None: nested deeper than `max_depth`, an
    integer outside 64 bits, or a NaN or infinite number (Python's JSON reader accepts them).
    Iterative (no recursion) and linear in the size of `value`; strings, the bulk of a payload,
    cost one type test each."""
    problem = _scalar_problem(value)
    if problem is not None or not isinstance(value, dict | list):
        return problem
    pending: list[tuple[dict[str, object] | list[object], int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > max_depth:
            return f"is nested more than {max_depth} levels deep"
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is str:
                continue
            if kind is dict or kind is list:
                pending.append((child, depth + 1))  # type: ignore[arg-type]
            elif kind is int or kind is float:
                problem = _scalar_problem(child)
                if problem is not None:
                    return problem
    return None


def _scalar_problem(value: object) -> str | None:
    if type(value) is int and not MIN_INT64 <= value <= MAX_INT64:
        return f"holds an integer outside the signed 64-bit range ({value.bit_length()} bits)"
    if type(value) is float and not math.isfinite(value):
        return f"holds the number {value!r} (JSON has no NaN or Infinity)"
    return None


def clean_text(value: str) -> str:
    """`value` with NUL and lone surrogates replaced by U+FFFD (for what a tool or an LLM returned)."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode()
    except UnicodeEncodeError:
        value = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    return value


Checker = Callable[[AvroModel], str | None]


def _checker(model: type[AvroModel]) -> Checker:
    ids: list[tuple[str, int, bool]] = []
    texts: list[str] = []
    many_ids: list[tuple[str, int]] = []
    many_texts: list[str] = []
    for name, info in model.model_fields.items():
        annotation = str(info.annotation)
        if "str" not in annotation:
            continue
        many = "tuple" in annotation
        if name in ID_FIELDS or name in OPERATION_FIELDS:
            limit = MAX_OPERATION_ID if name in OPERATION_FIELDS else MAX_ID
            if many:
                many_ids.append((name, limit))
            else:
                ids.append((name, limit, name in ("conversation_id", "source_conversation_id")))
        else:
            (many_texts if many else texts).append(name)

    def check(record: AvroModel) -> str | None:
        # Plain loops over C-level string methods: this runs on every consumed record.
        fields = record.__dict__
        for name, limit, conversation in ids:
            value = fields[name]
            if value is not None and (
                not 0 < len(value) <= limit or not value.isprintable() or (conversation and "/" in value)
            ):
                return _culprit(name, value, limit, conversation)
        for name in texts:
            value = fields[name]
            if value is not None and "\x00" in value:
                return f"`{name}` holds a NUL character"
        for name, limit in many_ids:
            for value in fields[name]:
                if not 0 < len(value) <= limit or not value.isprintable():
                    return _culprit(name, value, limit, False)
        for name in many_texts:
            if any("\x00" in value for value in fields[name]):
                return f"`{name}` holds a NUL character"
        return None

    return check


def _culprit(name: str, value: str, limit: int, conversation: bool) -> str:
    problem = conversation_id_problem(value) if conversation else id_problem(value, limit)
    return f"`{name}` {shown(value)} {problem}"


_CHECKERS: dict[type[AvroModel], Checker] = {}


def record_checker(model: type[AvroModel]) -> Checker:
    """The rule check of `model`'s records (`record_problem` without the per-call lookup)."""
    check = _CHECKERS.get(model)
    if check is None:
        check = _CHECKERS[model] = _checker(model)
    return check


def record_problem(record: AvroModel) -> str | None:
    """Why a record breaks the identifier and text rules, or None (cheap: runs on every record)."""
    return record_checker(type(record))(record)


def check_record(record: AvroModel, what: str = "") -> AvroModel:
    """`record` if it keeps the rules.

    Raises:
        InvalidRecordError: it does not (a data error: the record goes to the DLQ).
    """
    problem = record_problem(record)
    if problem is not None:
        raise InvalidRecordError(f"{what or type(record).__name__}: {problem}")
    return record
