"""Tool: schema generation, docstring parsing, argument validation, calling and rendering."""

import asyncio
import contextvars
import dataclasses
import enum
import functools
import json
import threading
import time
from typing import Annotated, Any, ClassVar, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from baf.errors import (
    ConfigurationError,
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolTimeoutError,
)
from baf.reasoning import Tool
from baf.reasoning.tool import parse_docstring, tool
from baf.reasoning.tool_arguments import parse_arguments

# ---- helpers -------------------------------------------------------------------------------------------

_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


def props(fn: Any) -> dict[str, Any]:
    return Tool(fn).schema["function"]["parameters"]["properties"]


def prop(annotation: Any) -> dict[str, Any]:
    """The schema of a single required parameter annotated with ``annotation``."""

    def fn(x):
        return x

    fn.__annotations__ = {"x": annotation}
    return props(fn)["x"]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    """A postal address."""

    street: str
    zip_code: int | None = None


class Order(BaseModel):
    id: int
    address: Address
    items: list[Address] = []


class Node(BaseModel):
    value: int
    children: list["Node"] = []


class Session:
    """Stands in for baf.core.session.Session: tools recognise the class by its name."""

    def __init__(self, user: str) -> None:
        self.user = user


# ---- schema ----------------------------------------------------------------------------------------------


def test_full_schema_shape() -> None:
    def search(query: str, limit: int = 10) -> list[str]:
        """Search the catalogue.

        Args:
            query: Free-text search terms.
            limit: How many results to return at most.
        """
        return []

    assert Tool(search).schema == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the catalogue.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"description": "Free-text search terms.", "type": "string"},
                    "limit": {"description": "How many results to return at most.", "type": "integer", "default": 10},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (list, {"type": "array"}),
        (dict, {"type": "object"}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list[list[str]], {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict[str, Any], {"type": "object"}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (Literal["asc", "desc"], {"type": "string", "enum": ["asc", "desc"]}),
        (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Any, {}),
        (Annotated[str, "The user's name."], {"description": "The user's name.", "type": "string"}),
        (Annotated[int, Field(ge=0)], {"type": "integer", "minimum": 0}),
    ],
)
def test_schema_per_type(annotation: Any, expected: dict[str, Any]) -> None:
    assert prop(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 - the typing spelling is under test
        (int | None, {"type": ["integer", "null"]}),
        (list[str] | None, {"type": ["array", "null"], "items": {"type": "string"}}),
        (Literal["a", "b"] | None, {"type": ["string", "null"], "enum": ["a", "b", None]}),
        (Color | None, {"type": ["string", "null"], "enum": ["red", "blue", None]}),
        (int | str | None, {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}),
    ],
)
def test_optional_is_nullable_and_not_required(annotation: Any, expected: dict[str, Any]) -> None:
    def fn(x):
        return x

    fn.__annotations__ = {"x": annotation}
    parameters = Tool(fn).parameters
    assert parameters["properties"]["x"] == expected
    assert parameters["required"] == []


def test_defaults_make_parameters_optional_and_are_advertised() -> None:
    def fn(a: int, b: str = "x", c: Color = Color.BLUE, d: tuple[int, int] = (1, 2), e: object = object()) -> None:
        pass

    parameters = Tool(fn).parameters
    assert parameters["required"] == ["a"]
    assert parameters["properties"]["b"] == {"type": "string", "default": "x"}
    assert parameters["properties"]["c"] == {"type": "string", "enum": ["red", "blue"], "default": "blue"}
    assert parameters["properties"]["d"]["default"] == [1, 2]
    # object() has no JSON form: accepted as "any JSON", its default simply not advertised
    assert parameters["properties"]["e"] == {}


def test_unannotated_parameter_accepts_any_json() -> None:
    def fn(x, y=3):
        return x

    assert props(fn) == {"x": {}, "y": {"default": 3}}
    assert Tool(fn).validate_args({"x": [1, {"a": None}]}) == {"x": [1, {"a": None}]}


def test_pydantic_model_is_inlined_without_refs() -> None:
    def place(order: Order) -> None:
        pass

    schema = props(place)["order"]
    assert schema == {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "address": {
                "description": "A postal address.",
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip_code": {"type": ["integer", "null"], "default": None},
                },
                "required": ["street"],
            },
            "items": {
                "type": "array",
                "default": [],
                "items": {
                    "description": "A postal address.",
                    "type": "object",
                    "properties": {
                        "street": {"type": "string"},
                        "zip_code": {"type": ["integer", "null"], "default": None},
                    },
                    "required": ["street"],
                },
            },
        },
        "required": ["id", "address"],
    }
    assert "$ref" not in json.dumps(schema) and "$defs" not in json.dumps(schema)


def test_model_property_named_title_survives_title_stripping() -> None:
    class Book(BaseModel):
        title: str

    def add(book: Book) -> None:
        pass

    assert props(add)["book"] == {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}


def test_recursive_model_is_refused() -> None:
    def fn(tree: Node) -> None:
        pass

    with pytest.raises(ConfigurationError, match="refers to itself"):
        Tool(fn).schema  # noqa: B018  (the validator and its schema are built on first use)


def test_session_and_self_are_not_in_the_schema() -> None:
    def by_name(x: int, session=None) -> None:
        pass

    def by_type(x: int, ctx: Session) -> None:
        pass

    def by_forward_ref(x: int, ctx: "Optional[Session]" = None) -> None:  # noqa: UP045
        pass

    class Holder:
        def method(self, x: int) -> int:
            return x

    for fn in (by_name, by_type, by_forward_ref, Holder().method):
        parameters = Tool(fn).parameters
        assert list(parameters["properties"]) == ["x"]
        assert parameters["required"] == ["x"]
    assert Tool(by_type).takes_session and not Tool(Holder().method).takes_session


def test_unresolvable_session_hint_still_counts_as_session() -> None:
    def fn(x: int, session: "UndefinedSession") -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    assert list(Tool(fn).parameters["properties"]) == ["x"]


def test_unresolvable_hint_is_a_configuration_error_naming_the_parameter() -> None:
    def fn(x: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ConfigurationError, match=r"parameter 'x'.*NoSuchType"):
        Tool(fn)


@pytest.mark.parametrize("signature", ["*args", "**kwargs"])
def test_var_args_are_refused(signature: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def fn(a: int, {signature}): pass", namespace)
    with pytest.raises(ConfigurationError, match=r"not supported"):
        Tool(namespace["fn"])


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="invalid tool name"):
        Tool(lambda: None)
    assert Tool(lambda: None, name="noop").name == "noop"
    with pytest.raises(ConfigurationError, match="invalid tool name"):
        Tool(print, name="has space")
    with pytest.raises(ConfigurationError, match="timeout"):
        Tool(lambda: None, name="t", timeout=0)

    def keyed(x: dict[int, str]) -> None:
        pass

    with pytest.raises(ConfigurationError, match="dict keys must be str"):
        Tool(keyed)

    class Opaque:
        pass

    def opaque(x: Opaque) -> None:
        pass

    with pytest.raises(ConfigurationError, match="parameter 'x'"):
        Tool(opaque).schema  # noqa: B018


def test_explicit_name_and_description_win() -> None:
    def fn() -> None:
        """Docstring text."""

    t = Tool(fn, name="other", description="Explicit.", timeout=2.5, idempotent=True)
    assert t.schema["function"]["name"] == "other"
    assert t.schema["function"]["description"] == "Explicit."
    assert t.timeout == 2.5 and t.idempotent
    assert t.schema["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_schema_is_a_copy() -> None:
    def fn(x: int) -> None:
        pass

    t = Tool(fn)
    t.schema["function"]["name"] = "changed"
    assert t.schema["function"]["name"] == "fn"


# ---- docstrings ------------------------------------------------------------------------------------------


def test_docstring_description_and_multi_line_args() -> None:
    doc = """Summarise a document.

    Uses the house style; long documents
    are summarised per chapter.

    Args:
        path (str): Where the document is,
            relative to the workspace.

            A second paragraph about the path.
        words: Target length.
        *extra: Ignored, but parsed.

    Returns:
        The summary.

    Raises:
        ValueError: never mentioned as an argument.
    """
    description, args = parse_docstring(doc)
    assert description == "Summarise a document.\n\nUses the house style; long documents are summarised per chapter."
    assert args == {
        "path": "Where the document is, relative to the workspace.\n\nA second paragraph about the path.",
        "words": "Target length.",
        "extra": "Ignored, but parsed.",
    }


@pytest.mark.parametrize("header", ["Args:", "Arguments:", "Parameters:", "Keyword Args:"])
def test_docstring_arg_section_spellings(header: str) -> None:
    assert parse_docstring(f"Do it.\n\n{header}\n    x: The x.\n")[1] == {"x": "The x."}


def test_docstring_edge_cases() -> None:
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("One line.") == ("One line.", {})
    # A section header word inside prose is not a header.
    prose = "Returns: nothing useful, but this is prose."
    assert parse_docstring(prose) == (prose, {})


def test_docstring_feeds_parameter_descriptions_and_annotated_fallback() -> None:
    def fn(a: int, b: Annotated[str, "From Annotated."], c: Annotated[str, "Loses to the docstring."]) -> None:
        """Do.

        Args:
            a: From the docstring.
            c: Docstring wins.
        """

    assert props(fn) == {
        "a": {"description": "From the docstring.", "type": "integer"},
        "b": {"description": "From Annotated.", "type": "string"},
        "c": {"description": "Docstring wins.", "type": "string"},
    }


# ---- validation ------------------------------------------------------------------------------------------


def everything(
    name: str,
    count: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    order: Literal["asc", "desc"] = "asc",
    color: Color = Color.RED,
    address: Address | None = None,
    note: str | None = None,
    scores: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Take many kinds of argument."""
    return {"name": name}


EVERYTHING = Tool(everything)


def problems_of(raw: Any, t: Tool = EVERYTHING) -> str:
    with pytest.raises(ToolArgumentError) as info:
        t.validate_args(raw)
    return str(info.value)


def test_valid_arguments_are_converted() -> None:
    args = EVERYTHING.validate_args(
        '{"name": "n", "count": 3.0, "ratio": 2, "flag": false, "tags": ["a"], "order": "desc",'
        ' "color": "blue", "address": {"street": "Main St", "zip_code": 12345}}'
    )
    assert args == {
        "name": "n",
        "count": 3,
        "ratio": 2.0,
        "flag": False,
        "tags": ["a"],
        "order": "desc",
        "color": Color.BLUE,
        "address": Address(street="Main St", zip_code=12345),
    }  # note and scores were left out: their defaults apply
    assert type(args["count"]) is int and type(args["ratio"]) is float


def test_null_is_accepted_for_optional_parameters() -> None:
    args = EVERYTHING.validate_args(
        {"name": "n", "count": 1, "ratio": 1.0, "flag": True, "tags": [], "address": None, "note": None}
    )
    assert args["address"] is None and args["note"] is None


async def test_null_for_a_parameter_with_a_default_means_the_default() -> None:
    # Models often send null for what they leave unset; the schema says optional, so it is not an error.
    def forecast(city: str, days: int = 3, units: Literal["C", "F"] = "C") -> str:
        return f"{city} {days} {units}"

    tool = Tool(forecast)
    assert tool.validate_args('{"city": "Oslo", "days": null, "units": null}') == {"city": "Oslo"}
    assert await tool.run('{"city": "Oslo", "days": null}') == "Oslo 3 C"
    assert "argument 'city': expected string, got null" in problems_of({"city": None}, tool)

    # Where the type itself has null, null is that value, not "not given".
    def pick(a: Any = "d", b: Literal["x", None] = "x", c: int | None = 3) -> str:
        return f"{a} {b} {c}"

    assert Tool(pick).validate_args('{"a": null, "b": null, "c": null}') == {"a": None, "b": None, "c": None}


def test_null_is_refused_for_required_parameters() -> None:
    message = problems_of({"name": None, "count": 1, "ratio": 1.0, "flag": True, "tags": []})
    assert "argument 'name': expected string, got null" in message


def test_every_problem_is_collected_in_one_message() -> None:
    message = problems_of(
        '{"count": true, "ratio": "fast", "flag": 1, "tags": ["ok", 2], "order": "up", "color": "green",'
        ' "address": {"zip_code": "x"}, "scores": {"a": 1.5}, "bogus": 1, "other": 2}'
    )
    assert message.startswith("Invalid arguments for tool 'everything' (11 problems):")
    for line in [
        "- unknown arguments 'bogus', 'other' (accepted: name, count, ratio, flag, tags, order, color, address,"
        " note, scores)",
        "- missing required argument 'name' (string)",
        "- argument 'count': expected integer, got boolean true",
        "- argument 'ratio': expected number, got string \"fast\"",
        "- argument 'flag': expected boolean, got integer 1",
        "- argument 'tags[1]': expected string, got integer 2",
        '- argument \'order\': expected one of "asc", "desc", got string "up"',
        '- argument \'color\': expected one of "red", "blue", got string "green"',
        "- argument 'address.street': missing required field",
        "- argument 'address.zip_code': expected integer or null, got string \"x\"",
        "- argument 'scores.a': expected integer, got number 1.5",
    ]:
        assert line in message, line
    assert message.endswith("Fix the arguments and call the tool again.")


def test_bool_is_not_a_number_but_int_is_a_float() -> None:
    def fn(i: int, f: float) -> None:
        pass

    t = Tool(fn)
    assert "argument 'i': expected integer, got boolean false" in problems_of({"i": False, "f": 1}, t)
    assert "argument 'f': expected number, got boolean true" in problems_of({"i": 1, "f": True}, t)
    assert "argument 'i': expected integer, got number 1.5" in problems_of({"i": 1.5, "f": 1}, t)
    assert t.validate_args({"i": 1, "f": 1}) == {"i": 1, "f": 1.0}


def test_optional_mismatch_names_null_as_allowed() -> None:
    def fn(x: int | None = None) -> None:
        pass

    assert "argument 'x': expected integer or null, got string \"1\"" in problems_of({"x": "1"}, Tool(fn))


def test_nested_model_rules_are_strict_like_the_top_level() -> None:
    def fn(address: Address) -> None:
        pass

    message = problems_of({"address": {"street": 5, "zip_code": True}}, Tool(fn))
    assert "argument 'address.street': expected string, got integer 5" in message
    assert "argument 'address.zip_code': expected integer or null, got boolean true" in message
    assert "expected object (Address), got array" in problems_of({"address": []}, Tool(fn))


def test_containers_convert_to_the_annotated_type() -> None:
    def fn(pair: tuple[int, str], unique: set[int], addresses: list[Address], when: Level) -> None:
        pass

    args = Tool(fn).validate_args({"pair": [1, "a"], "unique": [3, 3, 1], "addresses": [{"street": "s"}], "when": 2})
    assert args == {"pair": (1, "a"), "unique": {1, 3}, "addresses": [Address(street="s")], "when": Level.HIGH}
    message = problems_of({"pair": [1, 2, 3], "unique": "x", "addresses": [{}], "when": 2.0}, Tool(fn))
    assert "argument 'pair': expected array of exactly 2 items, got array of 3 items" in message
    assert "argument 'unique': expected array of integer, got string \"x\"" in message
    assert "argument 'addresses[0].street': missing required field" in message
    assert "argument 'when': expected one of 1, 2, got number 2.0" in message


def test_literal_true_does_not_match_one() -> None:
    def fn(x: Literal[1, 2]) -> None:
        pass

    assert "expected one of 1, 2, got boolean true" in problems_of({"x": True}, Tool(fn))


def test_invalid_json_quotes_an_excerpt() -> None:
    raw = '{"name": "n", ' + "x" * 500
    message = problems_of(raw)
    assert "are not valid JSON" in message and "tool 'everything'" in message
    assert f"Received ({len(raw)} characters): " in message
    assert '{"name": "n", xxx' in message and "x" * 300 not in message


@pytest.mark.parametrize("raw", ["NaN", '{"count": Infinity}'])
def test_non_standard_json_constants_are_refused(raw: str) -> None:
    assert "not valid JSON" in problems_of(raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"name": "n", "count": 1, "count": 2}', "the key 'count' appears more than once in one object"),
        ('{"name": "n", "address": {"street": "a", "street": "b"}}', "the key 'street' appears more than once"),
        ('{"name": "n", "ratio": 1e999}', "the number 1e999 is too large"),
        ('{"name": "n", "ratio": -1e999}', "the number -1e999 is too large"),
    ],
)
def test_arguments_json_would_silently_change_are_refused(raw: str, reason: str) -> None:
    """A repeated key (JSON lets the last one win) or a number beyond any float (it would arrive as
    infinity) is refused with the reason, never passed on repaired."""
    message = problems_of(raw)
    assert "not valid JSON" in message and reason in message


def test_an_integer_too_large_for_a_float_parameter_is_an_argument_problem() -> None:
    message = problems_of('{"name": "n", "count": 1, "ratio": ' + "9" * 400 + ', "flag": true, "tags": []}')
    assert "argument 'ratio': expected number, got integer 99999" in message and "too large for a number" in message


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1}', '{"a": 1}  \n', '  {"a": 1}', '{"a": [1, {"b": null}], "c": "\\u00e9"}', "{}", '{"a": 1.5e3}'],
)
def test_an_object_is_read_as_json_reads_it(raw: str) -> None:
    """The usual text (an object, nothing around it) is read by the decoder's scanner alone; white space
    around it goes through the whole decoder: the same value either way."""
    assert parse_arguments("t", raw) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"a": 1}x', "Extra data"),
        ('{"a": 1} {"b": 2}', "Extra data"),
        ('{"a": 1', "Expecting ',' delimiter"),
        ('{"a": 1, "a": 2}', "the key 'a' appears more than once"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": 1e999}', "the number 1e999 is too large"),
    ],
)
def test_an_object_with_something_wrong_is_refused_with_the_reason(raw: str, reason: str) -> None:
    with pytest.raises(ToolArgumentError, match="not valid JSON") as caught:
        parse_arguments("t", raw)
    assert reason in str(caught.value)


def test_a_byte_order_mark_is_refused_as_json_loads_refuses_it() -> None:
    assert "Unexpected UTF-8 BOM" in problems_of('\ufeff{"name": "n"}')


@pytest.mark.parametrize(
    ("raw", "kind"), [("[1, 2]", "array of 2 items"), ('"text"', 'string "text"'), ("3", "integer 3")]
)
def test_arguments_must_be_an_object(raw: str, kind: str) -> None:
    assert problems_of(raw) == f"The arguments for tool 'everything' must be a JSON object, got {kind}."


def test_empty_arguments_mean_an_empty_object() -> None:
    def ping() -> str:
        return "pong"

    assert Tool(ping).validate_args("") == {}
    assert Tool(ping).validate_args("  ") == {}
    assert "unknown argument 'x' (accepted: no arguments)" in problems_of('{"x": 1}', Tool(ping))


def test_session_cannot_be_passed_by_the_model() -> None:
    def fn(x: int, session=None) -> None:
        pass

    assert "unknown argument 'session'" in problems_of({"x": 1, "session": "evil"}, Tool(fn))


def test_pydantic_fallback_types() -> None:
    import datetime
    import uuid

    def fn(when: datetime.date, ident: uuid.UUID, count: Annotated[int, Field(ge=0)]) -> None:
        pass

    t = Tool(fn)
    assert t.parameters["properties"] == {
        "when": {"type": "string", "format": "date"},
        "ident": {"type": "string", "format": "uuid"},
        "count": {"type": "integer", "minimum": 0},
    }
    ident = "12345678-1234-5678-1234-567812345678"
    assert t.validate_args({"when": "2024-02-29", "ident": ident, "count": 0}) == {
        "when": datetime.date(2024, 2, 29),
        "ident": uuid.UUID(ident),
        "count": 0,
    }
    message = problems_of({"when": "yesterday", "ident": ident, "count": -1}, t)
    assert "argument 'when'" in message and "argument 'count'" in message and "(2 problems)" in message


# ---- calling ---------------------------------------------------------------------------------------------


async def test_sync_function_runs_in_a_worker_thread() -> None:
    def where() -> str:
        return threading.current_thread().name

    assert await Tool(where).call({}) != threading.current_thread().name


async def test_sync_function_called_standalone_sees_the_callers_context_variables() -> None:
    # Without a session (nothing with ``run_sync``) the call goes to asyncio.to_thread.
    def read() -> str:
        return _REQUEST.get()

    token = _REQUEST.set("standalone")
    try:
        assert await Tool(read).call({}) == "standalone"
        assert await Tool(read).run("{}", session=object()) == "standalone"
    finally:
        _REQUEST.reset(token)


async def test_async_function_is_awaited_with_defaults_and_optional_none() -> None:
    async def greet(name: str, greeting: str = "Hello", suffix: str | None = None) -> str:
        await asyncio.sleep(0)
        return f"{greeting}, {name}{suffix or ''}"

    t = Tool(greet)
    assert await t.call(t.validate_args('{"name": "Ada"}')) == "Hello, Ada"
    assert await t.run('{"name": "Ada", "greeting": "Hi", "suffix": "!"}') == "Hi, Ada!"


async def test_session_is_injected() -> None:
    def whoami(prefix: str, session: Session) -> str:
        return prefix + session.user

    async def maybe(session: Session | None = None) -> str:
        return "none" if session is None else session.user

    assert await Tool(whoami).run('{"prefix": "user="}', session=Session("ada")) == "user=ada"
    assert await Tool(maybe).run("{}") == "none"
    assert await Tool(maybe).run("{}", session=Session("bob")) == "bob"


async def test_methods_and_callable_objects() -> None:
    class Counter:
        def __init__(self) -> None:
            self.total = 0

        def add(self, n: int) -> int:
            self.total += n
            return self.total

        async def __call__(self, n: int) -> int:
            return n * 2

    counter = Counter()
    assert await Tool(counter.add).run('{"n": 2}') == "2"
    assert await Tool(counter, name="double").run('{"n": 4}') == "8"


async def test_partials_and_callable_objects_use_the_right_docstring() -> None:
    def scale(factor: int, value: int) -> int:
        """Scale a value.

        Args:
            value: The value to scale.
        """
        return factor * value

    class Doubler:
        def __call__(self, value: int) -> int:
            """Double a value."""
            return value * 2

    triple = Tool(functools.partial(scale, 3), name="triple")
    assert triple.description == "Scale a value."
    assert triple.parameters["properties"] == {"value": {"description": "The value to scale.", "type": "integer"}}
    assert await triple.run('{"value": 2}') == "6"
    assert Tool(Doubler(), name="double").description == "Double a value."


async def test_positional_only_parameters() -> None:
    def fn(a: int, b: int = 10, /, c: int = 100) -> int:
        return a + b + c

    t = Tool(fn)
    assert await t.run('{"a": 1}') == "111"
    assert await t.run('{"a": 1, "b": 2, "c": 3}') == "6"


async def test_timeout_async() -> None:
    async def slow() -> None:
        await asyncio.sleep(10)

    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match=r"tool 'slow' did not finish within 0.05 seconds"):
        await Tool(slow, timeout=0.05).run("{}")
    assert time.monotonic() - started < 2


async def test_timeout_sync_thread_is_abandoned() -> None:
    release = threading.Event()

    def blocking() -> str:
        release.wait(5)
        return "late"

    try:
        with pytest.raises(ToolTimeoutError):
            await Tool(blocking, timeout=0.05).run("{}")
    finally:
        release.set()  # let the abandoned thread finish so the test leaves nothing behind


async def test_a_timeout_error_raised_by_the_tool_is_an_execution_error() -> None:
    def fn() -> None:
        raise TimeoutError("socket timed out")

    with pytest.raises(ToolExecutionError, match="TimeoutError: socket timed out"):
        await Tool(fn, timeout=5).run("{}")


async def test_exceptions_are_wrapped_with_cause() -> None:
    def broken(x: int) -> None:
        raise ValueError(f"bad value {x}")

    async def broken_async() -> None:
        raise KeyError("missing")

    with pytest.raises(ToolExecutionError) as info:
        await Tool(broken).run('{"x": 3}')
    assert str(info.value) == "tool 'broken' failed: ValueError: bad value 3"
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ToolExecutionError, match="tool 'broken_async' failed: KeyError: 'missing'"):
        await Tool(broken_async).run("{}")


async def test_tool_errors_raised_by_the_tool_pass_through() -> None:
    def picky() -> None:
        raise ToolError("ask for a smaller page")

    with pytest.raises(ToolError) as info:
        await Tool(picky).run("{}")
    assert type(info.value) is ToolError and str(info.value) == "ask for a smaller page"


async def test_call_checks_arguments_it_cannot_bind() -> None:
    def fn(x: int) -> int:
        return x

    with pytest.raises(ToolArgumentError, match="missing required argument 'x'"):
        await Tool(fn).call({})
    with pytest.raises(ToolArgumentError, match="unknown argument 'y'"):
        await Tool(fn).call({"x": 1, "y": 2})


async def test_run_validates_before_calling() -> None:
    calls: list[int] = []

    def fn(x: int) -> None:
        calls.append(x)

    with pytest.raises(ToolArgumentError):
        await Tool(fn).run('{"x": "1"}')
    assert calls == []


# ---- rendering -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain text", "plain text"),
        ("", ""),
        (None, "null"),
        (42, "42"),
        (1.5, "1.5"),
        (True, "true"),
        ({"a": [1, "é"]}, '{"a": [1, "é"]}'),
        ([1, 2], "[1, 2]"),
        ((1, 2), "[1, 2]"),
        (Address(street="s"), '{"street":"s","zip_code":null}'),
        ([Address(street="s")], '[{"street": "s", "zip_code": null}]'),
        (Point(1, 2), '{"x": 1, "y": 2}'),
        (Color.RED, '"red"'),
        ({"when": __import__("datetime").date(2024, 1, 2)}, '{"when": "2024-01-02"}'),
    ],
)
def test_render_result(value: Any, text: str) -> None:
    assert Tool.render_result(value) == text


async def test_run_renders_the_result() -> None:
    def fn() -> dict[str, Any]:
        return {"ok": True, "items": [Address(street="s")]}

    assert json.loads(await Tool(fn).run("{}")) == {"ok": True, "items": [{"street": "s", "zip_code": None}]}


# ---- decorator -------------------------------------------------------------------------------------------


async def test_tool_decorator_both_forms() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool(name="mul", timeout=1, idempotent=True)
    async def multiply(a: int, b: int) -> int:
        return a * b

    assert isinstance(add, Tool) and add.description == "Add two numbers."
    assert add(2, 3) == 5  # still callable as plain Python
    assert multiply.name == "mul" and multiply.idempotent and multiply.timeout == 1
    assert await multiply.run('{"a": 2, "b": 4}') == "8"
    assert repr(add) == "Tool(name='add', parameters=['a', 'b'])"


# ---- one pydantic validator per tool ---------------------------------------------------------------------


def test_constraints_are_both_shown_and_checked() -> None:
    """The schema the model sees and the check come from the same validator: a constraint written once
    appears in both, and its own sentence names the argument."""

    def page(size: Annotated[int, Field(ge=1, le=50)] = 10, word: Annotated[str, Field(min_length=2)] = "ab") -> None:
        pass

    t = Tool(page)
    assert t.parameters["properties"]["size"] == {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
    assert t.validate_args('{"size": 50.0}') == {"size": 50}  # a whole number still counts as an integer
    message = problems_of('{"size": 0, "word": "a"}', t)
    assert "(2 problems)" in message
    assert "- argument 'size': input should be greater than or equal to 1, got integer 0" in message
    assert "- argument 'word': string should have at least 2 characters, got string \"a\"" in message


def test_a_union_is_one_problem_naming_every_arm() -> None:
    def fn(key: int | str, keys: list[int | str]) -> None:
        pass

    message = problems_of('{"key": 1.5, "keys": [1, "a", true, {}]}', Tool(fn))
    assert message.startswith("Invalid arguments for tool 'fn' (3 problems):")
    assert "- argument 'key': expected integer or string, got number 1.5" in message
    assert "- argument 'keys[2]': expected integer or string, got boolean true" in message
    assert "- argument 'keys[3]': expected integer or string, got object" in message


def test_problems_deep_inside_containers_and_models_name_the_place() -> None:
    def fn(index: dict[str, list[int]], orders: list[Order]) -> None:
        pass

    message = problems_of('{"index": {"k": [1, "2"]}, "orders": [{"id": 1, "address": {"street": 3}}]}', Tool(fn))
    assert "- argument 'index.k[1]': expected integer, got string \"2\"" in message
    assert "- argument 'orders[0].address.street': expected string, got integer 3" in message


def test_one_value_literal_is_an_enum_and_optional_model_is_nullable() -> None:
    def fn(mode: Literal["fast"], where: Address | None = None) -> None:
        pass

    properties = Tool(fn).parameters["properties"]
    assert properties["mode"] == {"type": "string", "enum": ["fast"]}
    assert properties["where"]["type"] == ["object", "null"] and properties["where"]["default"] is None
    assert "expected object (Address) or null, got array of 0 items" in problems_of(
        {"mode": "fast", "where": []}, Tool(fn)
    )


def test_arguments_handed_in_by_code_follow_the_json_rules() -> None:
    def fn(color: Color, pair: tuple[int, str], address: Address, anything: Any = None) -> None:
        pass

    marker = object()
    args = Tool(fn).validate_args(
        {"color": Color.BLUE, "pair": (1, "a"), "address": Address(street="s"), "anything": marker}
    )
    assert args == {"color": Color.BLUE, "pair": (1, "a"), "address": Address(street="s"), "anything": marker}
    assert Tool(fn).validate_args({"color": "red", "pair": [2, "b"], "address": {"street": "t"}}) == {
        "color": Color.RED,
        "pair": (2, "b"),
        "address": Address(street="t"),
    }


def test_null_for_a_default_with_a_non_json_container_still_uses_json_rules() -> None:
    # Dropping a null (so the default applies) must not change how the other arguments are read.
    def fn(pair: tuple[int, str], color: Color = Color.RED, days: int = 3) -> None:
        pass

    assert Tool(fn).validate_args('{"pair": [1, "a"], "color": "blue", "days": null}') == {
        "pair": (1, "a"),
        "color": Color.BLUE,
    }


def test_a_type_pydantic_cannot_describe_names_the_parameter() -> None:
    from collections.abc import Callable

    def fn(ok: int, hook: Callable[[int], int]) -> None:
        pass

    with pytest.raises(ConfigurationError, match=r"tool 'fn', parameter 'hook'"):
        Tool(fn).schema  # noqa: B018


def test_the_validator_is_built_on_first_use_once_for_schema_and_validation() -> None:
    """Constructing a tool compiles nothing (most of its cost, for tools a request may never offer); the
    first schema or validation builds the one validator, and a type it cannot take is refused there,
    the same way from either side, every time."""
    built: list[int] = []

    class Counted(BaseModel):
        n: int

        @classmethod
        def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> Any:
            built.append(1)
            return handler(core_schema)

    def fn(item: Counted) -> int:
        return item.n

    tool = Tool(fn)
    assert built == []
    assert tool.validate_args('{"item": {"n": 2}}') == {"item": Counted(n=2)}
    assert built == [1] and tool.parameters["required"] == ["item"] and tool.schema
    assert built == [1]  # one validator, one schema: validation and the schema share it

    class Opaque:
        pass

    def opaque(x: Opaque) -> None:
        pass

    broken = Tool(opaque)
    for use in (lambda: broken.schema, lambda: broken.validate_args("{}"), lambda: broken.schema):
        with pytest.raises(ConfigurationError, match=r"tool 'opaque', parameter 'x'"):
            use()


async def test_an_agent_with_a_tool_it_cannot_describe_fails_to_start_naming_it() -> None:
    from baf import Agent
    from baf.library.state.reasoning_state_library import new_reasoning_state
    from baf.testing import ScriptedLLM

    class Opaque:
        pass

    agent = Agent("opaque", log="memory://")
    new_reasoning_state(agent, ScriptedLLM(["hi"]), enable_task_planning=False)

    @agent.tool
    def inspect_it(x: Opaque) -> str:
        """Inspect a thing."""
        return "seen"

    with pytest.raises(ConfigurationError, match=r"tool 'inspect_it', parameter 'x'"):
        await agent.start()  # not at the first message: the session would only record the error
    assert not agent.running


async def test_a_tool_whose_schema_comes_from_elsewhere_is_shown_it_checked_by_it_and_called_with_keywords() -> None:
    from baf.errors import ToolArgumentError

    class Positive:
        """Checks {"n": positive int}, like a JSON Schema from an MCP server would."""

        json_schema: ClassVar[dict[str, Any]] = {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]
        }  # fmt: skip

        def validate(self, raw: Any) -> dict[str, Any]:
            args = json.loads(raw) if isinstance(raw, str) else dict(raw)
            if not isinstance(args.get("n"), int) or args["n"] <= 0:
                raise ToolArgumentError("n must be a positive integer")
            return args

    async def double(**kwargs: Any) -> int:
        return 2 * kwargs["n"]

    tool = Tool(double, name="double", description="Double n.", arguments=Positive())
    assert tool.schema == {"type": "function", "function": {"name": "double", "description": "Double n.",
                                                            "parameters": Positive.json_schema}}  # fmt: skip
    assert await tool.run('{"n": 21}') == "42"
    with pytest.raises(ToolArgumentError, match="positive"):
        await tool.run('{"n": -1}')
    assert "parameters=['n']" in repr(tool)


def test_schema_cleaning_touches_keywords_not_property_names() -> None:
    class Spec(BaseModel):
        const: str
        items: list[str] = []
        anyOf: int | None = None  # a property spelled like a JSON Schema keyword

    def fn(spec: Spec) -> None:
        pass

    assert props(fn)["spec"]["properties"] == {
        "const": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}, "default": []},
        "anyOf": {"type": ["integer", "null"], "default": None},
    }


@pytest.mark.parametrize("opening", ['{"a": ', "["])
def test_arguments_nested_too_deeply_are_a_clear_error_not_a_crash(opening: str) -> None:
    raw = opening * 100_000 + "1"
    with pytest.raises(ToolArgumentError, match="nested too deeply") as caught:
        parse_arguments("t", raw)
    assert "not valid JSON" in str(caught.value)
