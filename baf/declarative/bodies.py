"""The bodies and conditions a YAML state is made of, composed from the session's public API.

A YAML state without a Python body or a reasoning body runs, in order: its ``set`` templates
(``session.set``), its action (a pattern body), then its ``reply`` template (``session.reply``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from baf.declarative.templates import CompiledTemplate

if TYPE_CHECKING:
    from baf.core.session import Session

__all__ = ["condition_from", "steps_body"]


def steps_body(
    sets: Mapping[str, CompiledTemplate],
    action: Callable[[Session], Awaitable[None]] | None,
    reply: CompiledTemplate | None,
) -> Callable[[Session], Awaitable[None]]:
    """A body that sets variables from templates, runs ``action``, then replies with a template.

    A template that fails raises :class:`~baf.errors.TemplateError`: the engine records it as the body's
    error and tells the user, as for any body.
    """
    variables = dict(sets)

    async def body(session: Session) -> None:
        for name, template in variables.items():
            session.set(name, template.render(session))
        if action is not None:
            await action(session)
        if reply is not None:
            session.reply(str(reply.render(session)))

    body.__name__ = "yaml_body"
    return body


def condition_from(expression: CompiledTemplate) -> Callable[[Session], Any]:
    """A transition condition: the expression's truth (a failing one is recorded and counts as false)."""

    def condition(session: Session) -> bool:
        return bool(expression.render(session))

    condition.__name__ = expression.source
    return condition
