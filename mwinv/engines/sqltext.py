"""Statement texts as engines share them: literals folded, so that statements differing only in their
literals have one query id."""

from __future__ import annotations

import re

_LITERAL = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b")


def normalized(text: str) -> str:
    """The text with literals replaced by '?', whitespace collapsed and case folded: statements that
    differ only in literals (tkprof lists them apart) share it, like Oracle's force-matching signature."""
    return " ".join(_LITERAL.sub("?", text).split()).lower()
