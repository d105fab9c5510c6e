"""Short display text: whitespace collapsed, cut at a limit with an ellipsis."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """`text` with runs of whitespace collapsed to one space, at most `limit` characters.

    A cut text ends with an ellipsis (counted in `limit`), cut at a word boundary when one is
    in the last third so that words are not chopped in half.
    """
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    cut = collapsed[: limit - 1]
    space = cut.rfind(" ")
    if collapsed[limit - 1] != " " and space >= (limit * 2) // 3:
        cut = cut[:space]  # the cut fell inside a word: drop its partial word
    return cut.rstrip() + ELLIPSIS
