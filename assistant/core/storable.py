"""What any database column accepts: text without NUL or unpaired surrogates, plain finite JSON;
and what a person typed, as it is checked and kept."""

from __future__ import annotations

import enum
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

# PostgreSQL refuses NUL in text and jsonb, and UTF-8 cannot encode a lone surrogate.
UNSTORABLE_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"
MAX_DEPTH = 32  # deeper JSON is refused as input and cut off when stored
MAX_INTEGER_BITS = 1024  # beyond this an integer cannot round-trip through JSON text cheaply

_ENCODER = DjangoJSONEncoder()

# Drawn as nothing though not format characters: fillers, blank braille, variation selectors, the
# combining grapheme joiner, Khmer's inherent vowels.
INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f\u17b4\u17b5") | frozenset(
    map(chr, [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
)
VISIBLE_CATEGORIES = frozenset("LNPS")  # letters, numbers, punctuation, symbols


def typed_text(text: str) -> str:
    """What a person typed as it is checked and kept: NFKC, invisible characters dropped,
    whitespace collapsed to single spaces and stripped."""
    text = unicodedata.normalize("NFKC", storable_text(text))
    kept = "".join(
        char
        for char in text
        if char.isspace() or not (char in INVISIBLE or unicodedata.category(char)[0] == "C")
    )
    return " ".join(kept.split())


def shows_something(text: str) -> bool:
    """Whether the text holds a character a reader sees (a letter, digit, punctuation, symbol)."""
    return any(
        unicodedata.category(char)[0] in VISIBLE_CATEGORIES and char not in INVISIBLE
        for char in text
    )


def storable_text(text: str) -> str:
    """The text with every NUL and unpaired surrogate replaced by U+FFFD."""
    return UNSTORABLE_CHARACTERS.sub(REPLACEMENT, text)


def storable(value: Any, _depth: int = 0) -> Any:
    """The value as plain JSON (str keys, lists, finite numbers) that every column can store."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return storable(value.value, _depth)
    if isinstance(value, int):
        return (
            value
            if value.bit_length() <= MAX_INTEGER_BITS
            else f"<{value.bit_length()}-bit integer>"
        )
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return storable_text(value)
    if _depth >= MAX_DEPTH:
        return "[nested too deeply]"
    if isinstance(value, Mapping):
        return {storable_text(str(key)): storable(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [storable(item, _depth + 1) for item in value]
    try:
        plain = _ENCODER.default(value)
    except TypeError:
        plain = str(value)
    return storable(plain, _depth + 1)


def unstorable(value: Any, _depth: int = 0) -> str | None:
    """Why this input value could not be stored as it is (None when it can): refused as input."""
    if isinstance(value, str):
        return "contains a NUL character or an unpaired surrogate" if _has_bad(value) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return "is too large a number" if value.bit_length() > MAX_INTEGER_BITS else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "is not a finite number"
    if not isinstance(value, Mapping | list | tuple):
        return None
    if _depth >= MAX_DEPTH:
        return f"is nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or _has_bad(key):
                return "has a key that is not plain text"
            problem = unstorable(item, _depth + 1)
            if problem:
                return problem
        return None
    return next((p for p in (unstorable(item, _depth + 1) for item in value) if p), None)


def _has_bad(text: str) -> bool:
    return UNSTORABLE_CHARACTERS.search(text) is not None


def plain(value: Any, _depth: int = 0) -> bool:
    """Whether the value is already plain JSON every column stores as it is (no conversion)."""
    if isinstance(value, str):
        return not _has_bad(value)
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value.bit_length() <= MAX_INTEGER_BITS
    if isinstance(value, float):
        return math.isfinite(value)
    if _depth >= MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and not _has_bad(key) and plain(item, _depth + 1)
            for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return all(plain(item, _depth + 1) for item in value)
    return False
