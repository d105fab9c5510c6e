"""Short display text: whitespace collapsed, cut at a limit with an ellipsis."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """`text` with runs of whitespace collapsed to one space, at most `limit` characters.

    A cut text ends with an ellipsis (counted in `limit`), cut at a word boundary when one is
    in the last third so that words are not chopped in half.
    """
    if len(text) > 4 * limit:
        # Collapsing a prefix gives a prefix of the collapsed text; once that prefix is longer
        # than `limit` the result depends on nothing after it (the index shortens 1 KB outputs).
        head = " ".join(text[: 4 * limit].split())
        if len(head) > limit:
            return _cut(head, limit)
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    return _cut(collapsed, limit)


def _cut(collapsed: str, limit: int) -> str:
    cut = collapsed[: limit - 1]
    space = cut.rfind(" ")
    if collapsed[limit - 1] != " " and space >= (limit * 2) // 3:
        cut = cut[:space]  # the cut fell inside a word: drop its partial word
    return cut.rstrip() + ELLIPSIS
