"""Typed handler parameters → JSON schema, argument validation and text parsing, built once."""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import json
import math
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidEntities, ToolDefinitionError
from .storable import storable_text, unstorable

Checker = Callable[[Any], Any]
TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})
NULL_WORDS = frozenset({"none", "null"})
# Every integer entity fits a signed 64-bit column; every string entity has a length limit.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_TEXT_LENGTH = 10_000
ASCII_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
ASCII_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


@dataclass(frozen=True, slots=True)
class Range:
    """Bounds of a number entity, both included: ``Annotated[int, Range(1, 100)]``."""

    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ToolDefinitionError(f"{self!r}: min is above max")

    def enforce(self, value: Any) -> Any:
        if self.min is not None and value < self.min:
            raise ValueError(f"must be at least {self.min:g}")
        if self.max is not None and value > self.max:
            raise ValueError(f"must be at most {self.max:g}")
        return value

    def schema(self, kind: str) -> dict[str, Any]:
        bounds = {"minimum": self.min, "maximum": self.max}
        return {key: bound for key, bound in bounds.items() if bound is not None}


@dataclass(frozen=True, slots=True)
class Length:
    """Bounds of a string's length or a list's size: ``Annotated[str, Length(max=100)]``."""

    max: int | None = None
    min: int = 0

    def __post_init__(self) -> None:
        if self.min < 0 or (self.max is not None and self.min > self.max):
            raise ToolDefinitionError(f"{self!r}: needs 0 <= min <= max")

    def enforce(self, value: Any) -> Any:
        unit = "items" if isinstance(value, list) else "characters"
        if len(value) < self.min:
            raise ValueError(f"must be at least {self.min} {unit} long")
        if self.max is not None and len(value) > self.max:
            raise ValueError(f"must be at most {self.max} {unit} long")
        return value

    def schema(self, kind: str) -> dict[str, Any]:
        prefix = "Items" if kind == "array" else "Length"
        bounds = {f"min{prefix}": self.min or None, f"max{prefix}": self.max}
        return {key: bound for key, bound in bounds.items() if bound is not None}


Bound = Range | Length
BOUND_KINDS: dict[type, frozenset[str]] = {
    Range: frozenset({"integer", "number"}),
    Length: frozenset({"string", "array"}),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Entity:
    """One entity a tool accepts: a keyword parameter of its handler."""

    name: str
    required: bool
    default: Any
    description: str
    kind: str
    schema: dict[str, Any]
    check: Checker
    parse_text: Checker


def _fail(expected: str) -> typing.NoReturn:
    raise ValueError(f"expected {expected}")


def _check_str(value: Any) -> str:
    if not isinstance(value, str):
        _fail("a string")
    if len(value) > MAX_TEXT_LENGTH:
        raise ValueError(f"must be at most {MAX_TEXT_LENGTH} characters long")
    return value


def _check_int(value: Any) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        _fail("an integer")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("must fit in 64 bits (between -2**63 and 2**63-1)")
    return value


def _check_float(value: Any) -> float:
    if type(value) not in (int, float):
        _fail("a number")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("is too large a number") from None
    return number if math.isfinite(number) else _fail("a finite number")


def _check_bool(value: Any) -> bool:
    return value if type(value) is bool else _fail("true or false")


def _check_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else _fail("an object")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    _fail("true or false")


def _parse_int(text: str) -> int:
    # int() also reads other scripts' digits; an entity typed as text takes ASCII ones only.
    digits = text.strip()
    if not ASCII_INTEGER.fullmatch(digits) or len(digits) > 20:
        _fail("an integer")
    return int(digits)


def _parse_float(text: str) -> float:
    number = text.strip()
    if not ASCII_NUMBER.fullmatch(number) or len(number) > 40:
        _fail("a number")
    return _check_float(float(number))


def _parse_json_object(text: str) -> dict[str, Any]:
    try:
        return _check_dict(json.loads(text))
    except json.JSONDecodeError:
        _fail("a JSON object")


def _iso(parser: Callable[[str], Any], expected: str, kind: type) -> Checker:
    def check(value: Any) -> Any:
        # A datetime is a date subclass: accept exactly the target type, or ISO text.
        if type(value) is kind:
            return value
        if not isinstance(value, str):
            _fail(expected)
        try:
            return parser(value)
        except ValueError:
            _fail(expected)

    return check


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        _fail("a UUID")
    try:
        return uuid.UUID(value)
    except ValueError:
        _fail("a UUID")


_SIMPLE: dict[Any, tuple[str, dict[str, Any], Checker, Checker]] = {
    str: ("string", {"type": "string"}, _check_str, str),
    int: ("integer", {"type": "integer"}, _check_int, _parse_int),
    float: ("number", {"type": "number"}, _check_float, _parse_float),
    bool: ("boolean", {"type": "boolean"}, _check_bool, _parse_bool),
    dict: ("object", {"type": "object"}, _check_dict, _parse_json_object),
    uuid.UUID: ("string", {"type": "string", "format": "uuid"}, _uuid, _uuid),
    dt.date: (
        "string",
        {"type": "string", "format": "date"},
        _iso(dt.date.fromisoformat, "a date (YYYY-MM-DD)", dt.date),
        _iso(dt.date.fromisoformat, "a date (YYYY-MM-DD)", dt.date),
    ),
    dt.datetime: (
        "string",
        {"type": "string", "format": "date-time"},
        _iso(dt.datetime.fromisoformat, "an ISO 8601 date-time", dt.datetime),
        _iso(dt.datetime.fromisoformat, "an ISO 8601 date-time", dt.datetime),
    ),
}


def _choices(values: tuple[Any, ...], convert: Callable[[Any], Any]) -> tuple[Checker, Checker]:
    by_value = {value: convert(value) for value in values}
    by_text = {str(value).lower(): convert(value) for value in values}
    expected = "one of " + ", ".join(repr(v) for v in values)

    bools_allowed = any(type(value) is bool for value in values)

    def check(value: Any) -> Any:
        # True == 1 in Python: a JSON boolean must not pass for an integer choice.
        if type(value) is bool and not bools_allowed:
            _fail(expected)
        try:
            return by_value[value]
        except (KeyError, TypeError):
            _fail(expected)

    def parse(text: str) -> Any:
        try:
            return by_text[text.strip().lower()]
        except KeyError:
            _fail(expected)

    return check, parse


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "number" if isinstance(value, float) else "string"


def describe_type(hint: Any) -> tuple[str, dict[str, Any], Checker, Checker]:
    """Return (kind, JSON schema, checker, text parser) for a supported annotation."""
    if hint in _SIMPLE:
        kind, schema, check, parse = _SIMPLE[hint]
        return kind, dict(schema), check, parse
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        described = describe_type(args[0])
        for bound in args[1:]:
            if isinstance(bound, Range | Length):
                described = _bounded(bound, *described)
        return described
    if origin is typing.Literal:
        check, parse = _choices(args, lambda value: value)
        return "enum", {"type": _json_type(args[0]), "enum": list(args)}, check, parse
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = tuple(member.value for member in hint)
        check, parse = _choices(values, hint)
        return "enum", {"type": _json_type(values[0]), "enum": list(values)}, check, parse
    if origin is list or hint is list:
        return _describe_list(args[0] if args else str)
    if origin is dict:
        return describe_type(dict)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = tuple(arg for arg in args if arg is not type(None))
        if len(rest) == 1:
            return _describe_optional(rest[0])
    raise TypeError(f"unsupported type {hint!r}")


def _bounded(
    bound: Bound, kind: str, schema: dict[str, Any], check: Checker, parse: Checker
) -> tuple[str, dict[str, Any], Checker, Checker]:
    """The description with ``bound`` enforced after the type's own check (None passes)."""
    if kind not in BOUND_KINDS[type(bound)]:
        raise TypeError(f"unsupported bound {bound!r} on a {kind}")

    def bounded_check(value: Any) -> Any:
        checked = check(value)
        return None if checked is None else bound.enforce(checked)

    return kind, {**schema, **bound.schema(kind)}, bounded_check, parse


def _describe_list(item: Any) -> tuple[str, dict[str, Any], Checker, Checker]:
    _, item_schema, item_check, item_parse = describe_type(item)

    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            _fail("a list")
        return [item_check(element) for element in value]

    def parse(text: str) -> list[Any]:
        return [item_parse(part.strip()) for part in text.split(",") if part.strip()]

    return "array", {"type": "array", "items": item_schema}, check, parse


def _describe_optional(inner: Any) -> tuple[str, dict[str, Any], Checker, Checker]:
    kind, schema, inner_check, inner_parse = describe_type(inner)
    if "enum" in schema:
        schema = {**schema, "enum": [*schema["enum"], None]}
    if isinstance(schema.get("type"), str):
        schema = {**schema, "type": [schema["type"], "null"]}
    else:
        schema = {"anyOf": [schema, {"type": "null"}]}

    def check(value: Any) -> Any:
        return None if value is None else inner_check(value)

    def parse(text: str) -> Any:
        return None if text.strip().lower() in NULL_WORDS else inner_parse(text)

    return kind, schema, check, parse


def entities_from_handler(
    handler: Callable[..., Any], operation: str, *, method: bool = False
) -> tuple[Entity, ...]:
    """Read a handler's signature: (``self``,) the ``ToolCall``, then the entities."""
    try:
        hints = typing.get_type_hints(handler, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"{operation}: cannot resolve type hints ({exc})") from exc
    parameters = list(inspect.signature(handler).parameters.values())
    if method:
        parameters = parameters[1:]
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ToolDefinitionError(
            f"{operation}: the handler's first parameter must be the ToolCall (call: ToolCall)"
        )
    entities = []
    for parameter in parameters[1:]:
        entities.append(_entity(parameter, hints, operation))
    return tuple(entities)


def _entity(parameter: inspect.Parameter, hints: dict[str, Any], operation: str) -> Entity:
    name = parameter.name
    if parameter.kind not in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        raise ToolDefinitionError(
            f"{operation}: entity {name!r} must be a plain keyword parameter (no *args/**kwargs)"
        )
    if name not in hints:
        raise ToolDefinitionError(f"{operation}: entity {name!r} needs a type hint")
    hint = hints[name]
    description = _description(hint)
    try:
        kind, schema, check, parse = describe_type(hint)
    except TypeError as exc:
        raise ToolDefinitionError(f"{operation}: entity {name!r} has an {exc}") from exc
    required = parameter.default is inspect.Parameter.empty
    default = None if required else parameter.default
    if description:
        schema["description"] = description
    if not required and default is not None:
        try:
            json.dumps(default)
            schema["default"] = default
        except TypeError:
            pass
    return Entity(
        name=name,
        required=required,
        default=default,
        description=description,
        kind=kind,
        schema=schema,
        check=check,
        parse_text=parse,
    )


def _description(hint: Any) -> str:
    """The first string in ``Annotated[...]`` metadata, also inside ``X | None``."""
    if typing.get_origin(hint) is typing.Annotated:
        return next((item for item in typing.get_args(hint)[1:] if isinstance(item, str)), "")
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((d for d in map(_description, typing.get_args(hint)) if d), "")
    return ""


def parameters_schema(entities: tuple[Entity, ...]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments object, as LLM tool-calling APIs expect it."""
    return {
        "type": "object",
        "properties": {entity.name: entity.schema for entity in entities},
        "required": [entity.name for entity in entities if entity.required],
        "additionalProperties": False,
    }


def validate_entities(
    entities: tuple[Entity, ...],
    by_name: Mapping[str, Entity],
    values: Mapping[str, Any] | None,
    operation: str,
) -> dict[str, Any]:
    """Return the values checked and normalised, or raise ``InvalidEntities`` naming each problem."""
    if not values:
        if not entities:
            return {}
        values = {}
    elif not isinstance(values, Mapping):
        raise InvalidEntities({"entities": "expected an object"}, operation=operation)
    errors: dict[str, str] = {}
    for name in values:
        if name not in by_name:
            errors[storable_text(str(name))[:100]] = "unknown entity"
    result: dict[str, Any] = {}
    for entity in entities:
        if entity.name in values:
            value = values[entity.name]
            problem = unstorable(value, 1)  # level 0 is the entities object around it
            if problem is not None:
                errors[entity.name] = problem
                continue
            try:
                result[entity.name] = entity.check(value)
            except (ValueError, TypeError, OverflowError) as exc:
                errors[entity.name] = storable_text(str(exc))
        elif entity.required:
            errors[entity.name] = "required"
    if errors:
        raise InvalidEntities(errors, operation=operation)
    return result
