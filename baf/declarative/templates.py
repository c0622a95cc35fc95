"""Templates of YAML agents: Jinja2 in its sandbox, strict about missing variables.

A template sees the session's variables as ``session`` (and as ``state``, the name The Edge Agent's
files use: ``{{ state.math_problem }}``), the event being handled as ``event`` (``event.text``,
``event.type``, ``event.payload``, ``event.intent``, ``event.score``, ``event.parameters``) and the
session id as ``session_id``. Reading a variable that is not set fails (``StrictUndefined``) instead of
rendering an empty string, and the sandbox refuses attributes that lead out of the data (``__class__``,
``__globals__``, ...). Templates are compiled when the file is loaded, so a syntax error or a reach for
an attribute starting with ``_`` is reported with the file's line and column before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from baf.core.session import runtime_side
from baf.errors import MissingExtraError, TemplateError

if TYPE_CHECKING:
    from jinja2 import Template

    from baf.core.session import Session

__all__ = ["CompiledTemplate", "compile_expression", "compile_template", "environment", "template_context"]


def _environment() -> Any:
    try:
        from jinja2 import StrictUndefined
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        raise MissingExtraError("YAML agents (Jinja2, for their templates)", "yaml") from exc
    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


_ENV: Any = None


def environment() -> Any:
    """The one sandboxed environment (created on first use: Jinja2 is imported only for YAML agents)."""
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


class CompiledTemplate:
    """A template checked at load time; :meth:`render` fills it from a session."""

    def __init__(self, source: str, where: str, template: Template, expression: bool) -> None:
        self.source = source
        self.where = where  # "agent.yaml:12:9 (states[1].reply)", for runtime errors
        self._template: Any = template  # a Template, or a compiled expression (a callable)
        self._expression = expression

    def render(self, session: Session) -> Any:
        """The rendered text (an expression's value, for a condition); :class:`TemplateError` if it fails."""
        return self.render_with(template_context(session))

    def render_with(self, context: dict[str, Any]) -> Any:
        """Render with an explicit context (``session``, ``event``, ...)."""
        from jinja2 import TemplateError as JinjaError

        try:
            return self._template(**context) if self._expression else self._template.render(**context)
        except JinjaError as exc:
            raise TemplateError(f"template at {self.where} failed: {exc}") from None


def compile_template(source: str, where: str) -> CompiledTemplate:
    """Compile a text template; :class:`ValueError` (with the reason) if it cannot be one."""
    env = environment()
    _check_source(env, source)
    return CompiledTemplate(source, where, env.from_string(source), expression=False)


def compile_expression(source: str, where: str) -> CompiledTemplate:
    """Compile an expression (``session.count > 3``); rendering gives its value."""
    env = environment()
    _check_source(env, "{{ " + source + " }}")
    try:
        compiled = env.compile_expression(source, undefined_to_none=False)
    except Exception as exc:
        raise ValueError(f"not a valid expression: {exc}") from None
    return CompiledTemplate(source, where, compiled, expression=True)


def _check_source(env: Any, source: str) -> None:
    """Parse ``source``; refuse underscore attributes outright (the sandbox would refuse them at render)."""
    from jinja2 import TemplateSyntaxError, nodes

    try:
        tree = env.parse(source)
    except TemplateSyntaxError as exc:
        raise ValueError(f"not a valid template (line {exc.lineno} of the template): {exc.message}") from None
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(name, str) and name.startswith("_"):
            raise ValueError(f"the template reads {name!r}: names starting with '_' are refused (sandbox)")


def template_context(session: Session) -> dict[str, Any]:
    """What a template sees: ``session``/``state`` (the variables), ``event`` and ``session_id``."""
    # The projection's own dict, not a copy per render: the sandbox is immutable, so templates cannot
    # change it (and the variables are JSON values, so nothing reachable from them leads out).
    variables = runtime_side(session).projection.variables
    event = session.event
    shown: dict[str, Any] = {}
    if event is not None:
        shown = {"type": event.type_name, "text": event.text}
        payload = getattr(event, "payload", None)
        if payload is not None:
            shown["payload"] = payload
        prediction = event.predicted_intent
        if prediction is not None:
            shown.update(intent=prediction.intent_name, score=prediction.score, parameters=dict(prediction.parameters))
    return {"session": variables, "state": variables, "event": shown, "session_id": session.id}
