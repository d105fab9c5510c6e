"""Pure projections: `initial(...)` and `fold(state, event) -> state`, no I/O (DESIGN §2, §8).

Each module (`view`, `index`, `titles`, `stats`, `effects`) is one projection; import the
module and call `module.fold` / `module.fold_all`. The names below are the shared types.
"""

from convdb.projections._folding import fold_conversations
from convdb.projections.errors import (
    ConversationMismatchError,
    CursorError,
    IllegalTransitionError,
    ProjectionError,
    QueryError,
    SequenceGapError,
    UnknownEventError,
)
from convdb.projections.index import Cursor, IndexRow, SearchQuery, decode_cursor, encode_cursor, index_row
from convdb.projections.stats import ConversationStats
from convdb.projections.titles import TitleProcessor, wants_llm_title
from convdb.projections.view import ViewState, active_branch, path_to_root, view_as_of

__all__ = [
    "ConversationMismatchError",
    "ConversationStats",
    "Cursor",
    "CursorError",
    "IllegalTransitionError",
    "IndexRow",
    "ProjectionError",
    "QueryError",
    "SearchQuery",
    "SequenceGapError",
    "TitleProcessor",
    "UnknownEventError",
    "ViewState",
    "active_branch",
    "decode_cursor",
    "encode_cursor",
    "fold_conversations",
    "index_row",
    "path_to_root",
    "view_as_of",
    "wants_llm_title",
]
