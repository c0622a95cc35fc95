"""Tools: plain Python functions the model can call.

A :class:`Tool` wraps a function (sync or async) and derives from its signature and Google-style docstring
the OpenAI function schema the model sees::

    def search(query: str, limit: int = 10) -> list[str]:
        \"\"\"Search the catalogue.

        Args:
            query: Free-text search terms.
            limit: How many results to return at most.
        \"\"\"

    tool = Tool(search)
    tool.schema        # {"type": "function", "function": {"name": "search", ...}}
    await tool.run('{"query": "shoes"}')   # validated, called, rendered to a string

The arguments are checked by one pydantic validator per tool, built once from the signature (when first
needed) and run in strict JSON mode; the schema the model sees is generated from that same validator
(:mod:`baf.reasoning.tool_arguments`). The rules it follows:

- ``str``, ``int``, ``float``, ``bool`` map to ``string``, ``integer``, ``number``, ``boolean``. A boolean
  is never accepted as a number; an integer is accepted for a ``float`` (and converted); a number with a
  zero fraction (``3.0``) is accepted for an ``int``, as JSON Schema defines ``integer``.
- ``list[X]``, ``tuple[X, ...]``, ``set[X]``, ``frozenset[X]`` and ``Sequence[X]`` are arrays (converted
  to the annotated container); ``tuple[X, Y]`` is a fixed-length array; ``dict[str, X]`` is an object.
- ``Optional[X]`` / ``X | None`` is optional and accepts ``null``; when the argument is left out and the
  parameter has no default, the function receives ``None``. Any other default makes a parameter optional,
  and ``null`` for it, where its type has no null, means "not given" (models often send it for what they
  leave unset): the default applies.
- ``Literal[...]`` and ``Enum`` subclasses become ``enum`` (an Enum argument arrives as the member).
- A pydantic ``BaseModel`` becomes a nested object schema, inlined (no ``$ref``); the argument arrives as
  a model instance. Recursive models cannot be inlined and are refused.
- Other types pydantic understands (``datetime``, ``UUID``, ``TypedDict``, ``Annotated`` with
  constraints, ...) are described and checked by pydantic.
- An unannotated parameter (or ``Any``) accepts any JSON value.
- Descriptions come from the docstring's ``Args:`` section (:mod:`baf.reasoning.tool_docstring`), or
  from ``Annotated[X, "text"]``.
- A parameter named ``session``, or annotated with a class named ``Session``, is injected by the runtime
  (:meth:`Tool.call`'s ``session``) and never appears in the schema. A leading ``self`` is ignored
  (:mod:`baf.reasoning.tool_signature`).
- ``*args`` and ``**kwargs`` are refused with :class:`~baf.errors.ConfigurationError`: the model can
  only send named arguments, and a schema cannot describe "anything else".
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, overload

import pydantic
import pydantic_core

from baf.errors import (
    ConfigurationError,
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolTimeoutError,
)
from baf.reasoning.tool_arguments import ArgumentsValidator, ToolArguments, argument_error
from baf.reasoning.tool_docstring import docstring_of, parse_docstring
from baf.reasoning.tool_signature import EMPTY, ToolParameter, read_signature

__all__ = ["Tool", "parse_docstring", "tool"]

# OpenAI rejects function names outside this pattern; failing at construction beats a 400 at run time.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _to_jsonable(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, fallback=str)


class Tool:
    """A function the model can call, with its JSON schema, argument validation and result rendering.

    Args:
        fn: The function. Sync functions run in a worker thread so they cannot block the event loop;
            async functions are awaited.
        name: The name the model calls it by; defaults to the function's ``__name__``. Must match
            ``^[A-Za-z0-9_-]{1,64}$`` (the OpenAI rule).
        description: What the tool does; defaults to the docstring's text before its first section.
        timeout: Seconds the call may take before :class:`~baf.errors.ToolTimeoutError`. A sync function
            keeps running in its thread after the timeout (Python cannot kill a thread): its result is
            discarded, but its side effects still happen.
        idempotent: True when running the tool twice with the same arguments is harmless. The runtime
            may then re-run a call whose result was not recorded before a crash; a non-idempotent call
            is reported instead of repeated.
        requires_approval: ``True`` when a human must approve each call before it runs, or a policy
            ``(session, call) -> bool`` deciding per call (``call`` is the model's
            :class:`~baf.llm.base.ToolCall`). A call that needs approval is recorded and waits; the
            loop goes on once a decision arrives (``docs/human_approval.md``).
        arguments: For a tool whose schema comes from elsewhere (an MCP server's JSON Schema): what
            checks its arguments and gives their schema (:class:`~baf.reasoning.tool_arguments.ToolArguments`).
            ``fn``'s signature is then not read, and ``fn`` is called with the checked arguments as
            keywords. By default both come from ``fn``'s signature.

    The validator and the schema are built when first needed (:attr:`schema`, :meth:`validate_args`;
    an agent asks for its tools' schemas when it starts): most of a tool's construction otherwise, paid
    where the tool is only defined (a module imported, a command that reads the agent without running it).

    Raises:
        ConfigurationError: ``*args``/``**kwargs``, an invalid name or a bad timeout; a parameter type
            that has no JSON schema when the schema is first built (it names the tool and parameter).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
        requires_approval: bool | Callable[[Any, Any], bool] = False,
        *,
        arguments: ToolArguments | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(f"a tool wraps a callable, got {type(fn).__name__}")
        resolved_name = name if name is not None else getattr(fn, "__name__", None)
        if not isinstance(resolved_name, str) or not _NAME_RE.match(resolved_name):
            raise ConfigurationError(
                f"invalid tool name {resolved_name!r}: it must match ^[A-Za-z0-9_-]{{1,64}}$; pass name=..."
            )
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ConfigurationError(f"tool {resolved_name!r}: timeout must be a positive number of seconds")
        self.fn = fn
        self.name: str = resolved_name
        if not isinstance(requires_approval, bool) and not callable(requires_approval):
            raise ConfigurationError(
                f"tool {resolved_name!r}: requires_approval must be True, False or a function (session, call) -> bool"
            )
        self.timeout = timeout
        self.idempotent = idempotent
        self.requires_approval = requires_approval
        # An object whose __call__ is async counts too (B004 is about callable(), not this).
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )
        self._schema_built: dict[str, Any] | None = None
        self._signature: inspect.Signature | None = None
        self._session_param: str | None = None
        self._params: dict[str, ToolParameter] | None = None
        # What _bind reads for each parameter fn is called with, in order: (name, default, positional only,
        # nullable). Read once: inspect.Parameter's fields are properties, and reading them on every call
        # would add ~5,600 instructions to _bind's ~6,700 (bench/ab_instructions.py).
        self._binding: tuple[tuple[str, Any, bool, bool], ...] = ()
        if arguments is not None:  # the schema comes from elsewhere: fn's signature is not read
            self.description: str = description if description is not None else parse_docstring(docstring_of(fn))[0]
            self._arguments: ToolArguments = arguments
            return
        doc_description, doc_args = parse_docstring(docstring_of(fn))
        self.description = description if description is not None else doc_description
        read = read_signature(fn, resolved_name, doc_args)
        self._signature = read.signature
        self._session_param = read.session_param
        self._params = read.parameters
        self._binding = tuple(
            (param.name, param.default, param.kind is param.POSITIONAL_ONLY,
             param.name in read.parameters and read.parameters[param.name].nullable)
            for param in read.signature.parameters.values()
            if param.name not in read.skipped
        )  # fmt: skip
        self._arguments = ArgumentsValidator(resolved_name, read.parameters)

    @property
    def _schema(self) -> dict[str, Any]:
        # Built on first use: the parameters' schema comes with the validator (see ArgumentsValidator).
        if self._schema_built is None:
            self._schema_built = {
                "type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": self._arguments.json_schema},
            }  # fmt: skip
        return self._schema_built

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI tool schema: ``{"type": "function", "function": {name, description, parameters}}``.

        Raises:
            ConfigurationError: a parameter type has no JSON schema (the first time it is built).
        """
        return copy.deepcopy(self._schema)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object (``schema["function"]["parameters"]``)."""
        return copy.deepcopy(self._schema["function"]["parameters"])

    @property
    def takes_session(self) -> bool:
        """True when the function has a parameter the runtime fills with the session."""
        return self._session_param is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as plain Python (no validation, no thread, no timeout)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        names = (
            list(self._params)
            if self._params is not None
            else list(self._schema["function"]["parameters"].get("properties", {}))
        )
        return f"Tool(name={self.name!r}, parameters={names!r})"

    # ---- validation -------------------------------------------------------------------------------------

    def _fail(self, problems: list[str]) -> ToolArgumentError:
        return argument_error(self.name, problems)

    def validate_args(self, raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Parse and check the model's arguments, returning the ones to call the function with.

        ``raw`` is the JSON text the model produced (or an already-parsed mapping). Values are converted
        to the annotated types (Enum members, model instances, tuples, sets, floats). An optional
        parameter without a default that the model left out is returned as ``None``; one with a default
        that it left out or sent as ``null`` is left out so the function's default applies.

        Raises:
            ToolArgumentError: listing every problem at once (not JSON, not an object, missing or unknown
                arguments, wrong types), worded for the model to fix its call.
        """
        return self._arguments.validate(raw)

    # ---- calling ----------------------------------------------------------------------------------------

    def _bind(self, args: Mapping[str, Any], session: Any) -> tuple[list[Any], dict[str, Any]]:
        if self._signature is None or self._params is None:  # a schema from elsewhere: keywords as checked
            return [], dict(args)
        unknown = [key for key in args if key not in self._params]
        if unknown:
            raise self._fail([f"unknown argument '{key}'" for key in unknown])
        positional: list[Any] = []
        held_defaults: list[Any] = []  # defaults of positional-only params, needed only if a later one is set
        keyword: dict[str, Any] = {}
        session_param = self._session_param
        for name, default, positional_only, nullable in self._binding:
            if name == session_param:
                present, value = (session is not None or default is EMPTY), session
            elif name in args:
                present, value = True, args[name]
            elif default is EMPTY and nullable:
                present, value = True, None
            else:
                present, value = False, None
            if not present and default is EMPTY:
                raise self._fail([f"missing required argument '{name}'"])
            if positional_only:
                if present:
                    positional.extend(held_defaults)
                    held_defaults = []
                    positional.append(value)
                else:
                    held_defaults.append(default)
            elif present:
                keyword[name] = value
        return positional, keyword

    async def _invoke(self, positional: list[Any], keyword: dict[str, Any], session: Any) -> Any:
        try:
            if self._is_async:
                result = await self.fn(*positional, **keyword)
            else:
                # A baf session runs it on the agent's daemon threads for tools (Session.run_tool_sync),
                # which a stopping agent need not wait for; looked up by name, since reasoning must not
                # import baf.core.
                run_sync = getattr(session, "run_tool_sync", None)
                if run_sync is not None:
                    result = await run_sync(self.fn, *positional, **keyword)
                else:  # called standalone: asyncio's default threads
                    result = await asyncio.to_thread(self.fn, *positional, **keyword)
            if inspect.isawaitable(result):  # a sync wrapper that hands back a coroutine
                result = await result
            return result
        except ToolError:
            raise  # the tool chose a message for the model; keep it
        except Exception as exc:
            raise ToolExecutionError(f"tool '{self.name}' failed: {type(exc).__name__}: {exc}") from exc

    async def call(self, args: Mapping[str, Any], session: Any = None) -> Any:
        """Run the function with already-validated ``args`` (see :meth:`validate_args`).

        ``session`` is passed to the function's session parameter if it has one (a parameter with a
        default keeps it when ``session`` is None). Sync functions run in a worker thread, so a tool
        that touches the session must only use thread-safe parts of it: with a session that has a
        ``run_tool_sync`` method (a baf session), in the agent's threads for tools, so an agent that
        stops does not wait for a tool it gave up on; without one, in ``asyncio.to_thread``.

        Raises:
            ToolTimeoutError: the call ran past ``timeout``.
            ToolExecutionError: the function raised; the original exception is ``__cause__``. A
                :class:`~baf.errors.ToolError` raised by the function itself passes through unchanged.
        """
        positional, keyword = self._bind(args, session)
        if self.timeout is None:
            return await self._invoke(positional, keyword, session)
        # _invoke converts the function's own TimeoutError, so one arriving there is our deadline.
        return await self._within_timeout(self._invoke(positional, keyword, session), self.timeout)

    async def _within_timeout(self, call: Awaitable[Any], seconds: float) -> Any:
        """``await call`` within ``seconds``; past it, :class:`~baf.errors.ToolTimeoutError`."""
        try:
            async with asyncio.timeout(seconds):
                return await call
        except TimeoutError:
            raise ToolTimeoutError(
                f"tool '{self.name}' did not finish within {seconds:g} seconds and was abandoned"
            ) from None

    @staticmethod
    def render_result(value: Any) -> str:
        """Turn a tool's return value into the text the model reads.

        A string is passed as is; ``None`` becomes ``"null"``; everything else (numbers, booleans, dicts,
        lists, pydantic models, dataclasses, enums, dates) is rendered as JSON, with ``str()`` for
        anything JSON cannot express.
        """
        if isinstance(value, str):
            return value
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json()
        return json.dumps(_to_jsonable(value), ensure_ascii=False)

    async def run(self, raw_args: str | bytes | Mapping[str, Any], session: Any = None) -> str:
        """Validate the model's arguments, call the function and render its result for the model.

        Raises:
            ToolArgumentError: the arguments do not fit (see :meth:`validate_args`).
            ToolTimeoutError: the call ran past ``timeout``.
            ToolExecutionError: the function raised; its type and message are in the error's message.
        """
        args = self.validate_args(raw_args)
        return self.render_result(await self.call(args, session=session))


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any, Any], bool] = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    idempotent: bool = False,
    requires_approval: bool | Callable[[Any, Any], bool] = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :class:`Tool`: ``@tool`` or ``@tool(timeout=5)``.

    The decorated name becomes the :class:`Tool`; calling it still calls the function directly.
    """

    def decorate(function: Callable[..., Any]) -> Tool:
        return Tool(function, name=name, description=description, timeout=timeout, idempotent=idempotent,
                    requires_approval=requires_approval)  # fmt: skip

    return decorate(fn) if fn is not None else decorate
