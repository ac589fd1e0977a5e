"""Entities: the JSON schema a handler's type hints give, call validation, and text parsing."""

import datetime as dt
import enum
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

import jsonschema
import pytest

from assistant import AssistantTool, Length, Range, ToolCall, ToolResult
from assistant.exceptions import InvalidEntities, ToolDefinitionError


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


def tool_for(handler: Callable[..., Any]) -> AssistantTool:
    """The tool a public, safe declaration of ``handler`` gives (no registry involved)."""
    return AssistantTool.declare(
        handler,
        operation="typed_tool",
        domain="tests",
        description="A tool with typed entities",
        risk_level="safe",
        public=True,
    )


def every_kind(
    call: ToolCall,
    name: str,
    count: int,
    level: Level,
    ids: list[int],
    ratio: float = 0.5,
    flag: bool = False,
    status: Literal["open", "shut"] = "open",
    color: Color = Color.RED,
    tags: list[str] | None = None,
    meta: dict[str, object] | None = None,
    ident: uuid.UUID | None = None,
    day: dt.date | None = None,
    at: dt.datetime | None = None,
    note: Annotated[str, "a note for the record"] = "",
) -> ToolResult:
    return ToolResult(text="ok")


@pytest.fixture
def tool() -> AssistantTool:
    return tool_for(every_kind)


REQUIRED = {"name": "Ada", "count": 3, "level": 2, "ids": [1, 2]}


# --- the schema ------------------------------------------------------------------------------


def test_the_schema_follows_the_type_hints(tool):
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "level": {"type": "integer", "enum": [1, 2]},
            "ids": {"type": "array", "items": {"type": "integer"}},
            "ratio": {"type": "number", "default": 0.5},
            "flag": {"type": "boolean", "default": False},
            "status": {"type": "string", "enum": ["open", "shut"], "default": "open"},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}},
            "meta": {"type": ["object", "null"]},
            "ident": {"type": ["string", "null"], "format": "uuid"},
            "day": {"type": ["string", "null"], "format": "date"},
            "at": {"type": ["string", "null"], "format": "date-time"},
            "note": {"type": "string", "description": "a note for the record", "default": ""},
        },
        "required": ["name", "count", "level", "ids"],
        "additionalProperties": False,
    }


def test_the_schema_is_valid_json_schema(tool):
    jsonschema.Draft202012Validator.check_schema(tool.parameters)


def test_a_tool_without_entities_takes_an_empty_object():
    def ping(call: ToolCall) -> ToolResult:
        return ToolResult(text="pong")

    assert tool_for(ping).parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_keyword_only_parameters_are_entities_too():
    def search(call: ToolCall, *, query: str, page: int = 1) -> ToolResult:
        return ToolResult(text=query)

    schema = tool_for(search).parameters

    assert schema["properties"] == {
        "query": {"type": "string"},
        "page": {"type": "integer", "default": 1},
    }
    assert schema["required"] == ["query"]


@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (dict, {"type": "object"}),
        (dict[str, int], {"type": "object"}),
        (list, {"type": "array", "items": {"type": "string"}}),
        (list[float], {"type": "array", "items": {"type": "number"}}),
        (
            list[Literal["a", "b"]],
            {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        ),
        (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (uuid.UUID, {"type": "string", "format": "uuid"}),
        (dt.date, {"type": "string", "format": "date"}),
        (dt.datetime, {"type": "string", "format": "date-time"}),
        (int | None, {"type": ["integer", "null"]}),
        (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
    ],
)
def test_each_supported_type_has_its_schema(annotation, schema):
    def handler(call: ToolCall, value: int) -> ToolResult:
        return ToolResult(text="ok")

    handler.__annotations__["value"] = annotation

    assert tool_for(handler).parameters["properties"] == {"value": schema}


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param(Annotated[str | None, "the report's name"], id="annotated-optional"),
        pytest.param(Annotated[str, "the report's name"] | None, id="optional-annotated"),
    ],
)
def test_an_optional_entity_keeps_its_description(annotation):
    def handler(call: ToolCall, name: str | None = None) -> ToolResult:
        return ToolResult(text="ok")

    handler.__annotations__["name"] = annotation

    assert tool_for(handler).parameters["properties"] == {
        "name": {"type": ["string", "null"], "description": "the report's name"}
    }


@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param(Literal["open", "shut"] | None, id="literal"),
        pytest.param(Color | None, id="enum"),
    ],
)
def test_the_schema_accepts_null_for_an_optional_choice_as_validation_does(annotation):
    def handler(call: ToolCall, status: str | None = None) -> ToolResult:
        return ToolResult(text="ok")

    handler.__annotations__["status"] = annotation
    optional_choice = tool_for(handler)

    assert optional_choice.validate({"status": None}) == {"status": None}
    jsonschema.validate({"status": None}, optional_choice.parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "ajar"}, optional_choice.parameters)


def test_a_default_that_is_not_json_is_left_out_of_the_schema():
    def handler(call: ToolCall, since: dt.date = dt.date(2024, 1, 1)) -> ToolResult:
        return ToolResult(text="ok")

    assert tool_for(handler).parameters["properties"] == {
        "since": {"type": "string", "format": "date"}
    }


# --- validation ------------------------------------------------------------------------------


def test_valid_entities_come_back_checked_and_converted(tool):
    values = tool.validate(
        {
            **REQUIRED,
            "ratio": 2,
            "flag": True,
            "status": "shut",
            "color": "blue",
            "tags": ["a", "b"],
            "meta": {"key": [1, 2]},
            "ident": "12345678-1234-5678-1234-567812345678",
            "day": "2024-05-01",
            "at": "2024-05-01T10:30:00+00:00",
            "note": "hi",
        }
    )

    assert values == {
        "name": "Ada",
        "count": 3,
        "level": Level.HIGH,
        "ids": [1, 2],
        "ratio": 2.0,
        "flag": True,
        "status": "shut",
        "color": Color.BLUE,
        "tags": ["a", "b"],
        "meta": {"key": [1, 2]},
        "ident": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "day": dt.date(2024, 5, 1),
        "at": dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.UTC),
        "note": "hi",
    }
    assert type(values["ratio"]) is float


def test_none_is_accepted_for_optional_entities(tool):
    values = tool.validate({**REQUIRED, "tags": None, "meta": None, "day": None})

    assert values["tags"] is None
    assert values["meta"] is None
    assert values["day"] is None


def test_a_whole_float_is_accepted_as_an_integer(tool):
    values = tool.validate({**REQUIRED, "count": 2.0, "ids": [1.0, 2]})

    assert values["count"] == 2
    assert type(values["count"]) is int
    assert values["ids"] == [1, 2]
    assert [type(value) for value in values["ids"]] == [int, int]


@pytest.mark.parametrize(
    ("entity", "value", "problem"),
    [
        ("name", 5, "expected a string"),
        ("name", None, "expected a string"),
        ("count", "3", "expected an integer"),
        ("count", True, "expected an integer"),
        ("count", 2.5, "expected an integer"),
        ("count", None, "expected an integer"),
        ("ratio", "0.5", "expected a number"),
        ("ratio", False, "expected a number"),
        ("flag", "yes", "expected true or false"),
        ("flag", 1, "expected true or false"),
        ("level", 3, "expected one of 1, 2"),
        ("level", True, "expected one of 1, 2"),
        ("status", "closed", "expected one of 'open', 'shut'"),
        ("status", ["open"], "expected one of 'open', 'shut'"),
        ("color", "green", "expected one of 'red', 'blue'"),
        ("ids", 1, "expected a list"),
        ("ids", [1, "2"], "expected an integer"),
        ("ids", [True], "expected an integer"),
        ("tags", "a,b", "expected a list"),
        ("tags", ["a", 1], "expected a string"),
        ("meta", ["key"], "expected an object"),
        ("meta", "{}", "expected an object"),
        ("ident", "not-a-uuid", "expected a UUID"),
        ("ident", 42, "expected a UUID"),
        ("day", "01/05/2024", "expected a date (YYYY-MM-DD)"),
        ("day", 20240501, "expected a date (YYYY-MM-DD)"),
        ("at", "yesterday", "expected an ISO 8601 date-time"),
    ],
)
def test_a_value_of_the_wrong_type_is_invalid(tool, entity, value, problem):
    with pytest.raises(InvalidEntities) as excinfo:
        tool.validate({**REQUIRED, entity: value})

    assert excinfo.value.code == "invalid_entities"
    assert excinfo.value.errors == {entity: problem}
    assert str(excinfo.value) == f"Invalid entities for typed_tool: {entity}: {problem}"


def test_an_unknown_entity_is_invalid(tool):
    with pytest.raises(InvalidEntities) as excinfo:
        tool.validate({**REQUIRED, "colour": "red"})

    assert excinfo.value.errors == {"colour": "unknown entity"}


@pytest.mark.parametrize("values", [None, {}])
def test_missing_required_entities_are_each_named(tool, values):
    with pytest.raises(InvalidEntities) as excinfo:
        tool.validate(values)

    assert excinfo.value.errors == {
        "name": "required",
        "count": "required",
        "level": "required",
        "ids": "required",
    }


def test_every_problem_in_a_call_is_reported_at_once(tool):
    with pytest.raises(InvalidEntities) as excinfo:
        tool.validate({"name": "Ada", "count": "three", "ids": [1], "bogus": 1, "flag": "y"})

    assert excinfo.value.errors == {
        "bogus": "unknown entity",
        "count": "expected an integer",
        "level": "required",
        "flag": "expected true or false",
    }
    message = str(excinfo.value)
    for name in ("bogus", "count", "level", "flag"):
        assert name in message


@pytest.mark.parametrize("values", [["name", "Ada"], "name=Ada", 42])
def test_entities_that_are_not_an_object_are_invalid(tool, values):
    with pytest.raises(InvalidEntities) as excinfo:
        tool.validate(values)

    assert excinfo.value.errors == {"entities": "expected an object"}


def test_a_tool_without_entities_accepts_nothing_but_nothing():
    def ping(call: ToolCall) -> ToolResult:
        return ToolResult(text="pong")

    ping_tool = tool_for(ping)

    assert ping_tool.validate(None) == {}
    assert ping_tool.validate({}) == {}
    with pytest.raises(InvalidEntities) as excinfo:
        ping_tool.validate({"loud": True})
    assert excinfo.value.errors == {"loud": "unknown entity"}


def test_a_boolean_is_not_accepted_for_an_integer_choice():
    def handler(call: ToolCall, size: Literal[0, 1, 2] = 1) -> ToolResult:
        return ToolResult(text="ok")

    sized = tool_for(handler)

    assert sized.validate({"size": 2}) == {"size": 2}
    for value in (True, False):
        with pytest.raises(InvalidEntities) as excinfo:
            sized.validate({"size": value})
        assert excinfo.value.errors == {"size": "expected one of 0, 1, 2"}


# --- text parsing for the keyword planner ----------------------------------------------------


@pytest.mark.parametrize(
    ("entity", "kind"),
    [
        ("name", "string"),
        ("count", "integer"),
        ("level", "enum"),
        ("ids", "array"),
        ("ratio", "number"),
        ("flag", "boolean"),
        ("status", "enum"),
        ("color", "enum"),
        ("tags", "array"),
        ("meta", "object"),
        ("ident", "string"),
        ("day", "string"),
        ("at", "string"),
        ("note", "string"),
    ],
)
def test_each_entity_has_the_kind_the_planner_matches_on(tool, entity, kind):
    assert tool.entity_map[entity].kind == kind


@pytest.mark.parametrize(
    ("entity", "text", "value"),
    [
        ("name", "Ada Lovelace", "Ada Lovelace"),
        ("count", " 42 ", 42),
        ("count", "-3", -3),
        ("ratio", "0.25", 0.25),
        ("ratio", "3", 3.0),
        ("flag", "true", True),
        ("flag", "Yes", True),
        ("flag", "on", True),
        ("flag", "1", True),
        ("flag", "FALSE", False),
        ("flag", "no", False),
        ("flag", "off", False),
        ("flag", "0", False),
        ("status", "SHUT", "shut"),
        ("color", "Blue", Color.BLUE),
        ("level", "2", Level.HIGH),
        ("ids", "1, 2,3", [1, 2, 3]),
        ("tags", "red, green,,blue", ["red", "green", "blue"]),
        ("tags", "none", None),
        ("meta", '{"key": [1, 2]}', {"key": [1, 2]}),
        ("meta", "null", None),
        (
            "ident",
            "12345678-1234-5678-1234-567812345678",
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
        ),
        ("day", "2024-05-01", dt.date(2024, 5, 1)),
        ("day", "None", None),
        ("at", "2024-05-01T10:30:00+00:00", dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.UTC)),
    ],
)
def test_text_parses_to_the_entitys_declared_type(tool, entity, text, value):
    parsed = tool.entity_map[entity].parse_text(text)

    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(
    ("entity", "text"),
    [
        ("count", "many"),
        ("count", "2.5"),
        ("ratio", "half"),
        ("flag", "maybe"),
        ("status", "closed"),
        ("color", "green"),
        ("level", "3"),
        ("ids", "1,x"),
        ("meta", "{"),
        ("meta", "[1, 2]"),
        ("ident", "xyz"),
        ("day", "tomorrow"),
        ("at", "noon"),
        ("count", "²"),
        ("count", "\u0661\u0662"),  # Arabic-Indic digits: int() reads them, an entity does not
        ("count", "\uff11\uff12"),  # fullwidth digits
        ("count", "9" * 21),
        ("ratio", "\u0661.5"),
        ("ratio", "nan"),
        ("ratio", "inf"),
        ("ratio", "1e400"),
    ],
)
def test_text_that_does_not_parse_raises_value_error(tool, entity, text):
    with pytest.raises(ValueError, match=r"^expected "):
        tool.entity_map[entity].parse_text(text)


# --- bounds ----------------------------------------------------------------------------------


def bounded(
    call: ToolCall,
    page: Annotated[int, "page number", Range(1, 100)] = 1,
    pause: Annotated[float, Range(0, 5)] = 0.5,
    name: Annotated[str, "a name", Length(min=1, max=10)] = "x",
    note: Annotated[str | None, Length(max=3)] = None,
    tags: Annotated[list[Annotated[str, Length(max=2)]], Length(max=2)] | None = None,
) -> ToolResult:
    return ToolResult(text="ok")


def test_declared_bounds_are_in_the_schema_the_llm_sees():
    properties = tool_for(bounded).parameters["properties"]

    assert properties["page"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "description": "page number",
        "default": 1,
    }
    assert properties["pause"] == {"type": "number", "minimum": 0, "maximum": 5, "default": 0.5}
    assert properties["name"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 10,
        "description": "a name",
        "default": "x",
    }
    assert properties["note"] == {"type": ["string", "null"], "maxLength": 3}
    assert properties["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string", "maxLength": 2},
        "maxItems": 2,
    }
    jsonschema.Draft202012Validator.check_schema(tool_for(bounded).parameters)


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        ({"page": 0}, {"page": "must be at least 1"}),
        ({"page": 101}, {"page": "must be at most 100"}),
        ({"pause": 1e9}, {"pause": "must be at most 5"}),
        ({"pause": -0.5}, {"pause": "must be at least 0"}),
        ({"name": ""}, {"name": "must be at least 1 characters long"}),
        ({"name": "x" * 11}, {"name": "must be at most 10 characters long"}),
        ({"note": "long"}, {"note": "must be at most 3 characters long"}),
        ({"tags": ["a", "b", "c"]}, {"tags": "must be at most 2 items long"}),
        ({"tags": ["abc"]}, {"tags": "must be at most 2 characters long"}),
    ],
)
def test_a_value_out_of_its_declared_bounds_is_invalid(values, errors):
    with pytest.raises(InvalidEntities) as refused:
        tool_for(bounded).validate(values)

    assert refused.value.errors == errors


def test_values_within_their_bounds_and_none_for_an_optional_one_pass():
    values = {"page": 100, "pause": 5, "name": "x" * 10, "note": None, "tags": ["ab", "cd"]}

    assert tool_for(bounded).validate(values) == {**values, "pause": 5.0}


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        ({"count": 2**63}, {"count": "must fit in 64 bits (between -2**63 and 2**63-1)"}),
        ({"count": -(2**63) - 1}, {"count": "must fit in 64 bits (between -2**63 and 2**63-1)"}),
        ({"count": 1e19}, {"count": "must fit in 64 bits (between -2**63 and 2**63-1)"}),
        ({"ratio": 10**400}, {"ratio": "is too large a number"}),
        ({"ratio": 10**308 * 10}, {"ratio": "is too large a number"}),
        ({"ratio": float("nan")}, {"ratio": "is not a finite number"}),
        ({"ratio": float("-inf")}, {"ratio": "is not a finite number"}),
        ({"name": "x" * 10_001}, {"name": "must be at most 10000 characters long"}),
        ({"name": "a\x00"}, {"name": "contains a NUL character or an unpaired surrogate"}),
        ({"tags": ["\ud800"]}, {"tags": "contains a NUL character or an unpaired surrogate"}),
        ({"meta": {"\udc80": 1}}, {"meta": "has a key that is not plain text"}),
        ({"\ud800": 1}, {"\ufffd": "unknown entity"}),
    ],
)
def test_every_entity_has_default_bounds_that_fit_storage(tool, values, errors):
    with pytest.raises(InvalidEntities) as refused:
        tool.validate({**REQUIRED, **values})

    assert refused.value.errors == errors


def test_the_64_bit_limits_themselves_pass(tool):
    for count in (2**63 - 1, -(2**63)):
        assert tool.validate({**REQUIRED, "count": count})["count"] == count


@pytest.mark.parametrize(
    "annotation",
    [Annotated[str, Range(1, 2)], Annotated[int, Length(max=3)], Annotated[bool, Range(0, 1)]],
)
def test_a_bound_on_a_type_it_cannot_bound_fails_where_it_is_declared(annotation):
    def handler(call: ToolCall, value: int) -> ToolResult:
        return ToolResult(text="ok")

    handler.__annotations__["value"] = annotation

    with pytest.raises(ToolDefinitionError, match="unsupported bound"):
        tool_for(handler)


@pytest.mark.parametrize(
    "make", [lambda: Range(5, 1), lambda: Length(min=3, max=2), lambda: Length(min=-1)]
)
def test_a_bound_that_admits_nothing_fails_where_it_is_written(make):
    with pytest.raises(ToolDefinitionError):
        make()
