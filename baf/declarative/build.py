"""Building an :class:`~baf.core.agent.Agent` from a YAML agent file, through baf's Python API only.

:func:`load_agent` reads the file safely (``baf.declarative.source``), validates it against the models
(``baf.declarative.models``), then makes the calls a Python file would make: ``Agent(...)``,
``agent.new_intent``, ``agent.new_state``, ``state.when_intent_matched(...).go_to(...)`` and so on.
Every problem, from the YAML parser, the models or the Python API, is reported as an
:class:`~baf.errors.AgentFileError` naming the file, line and column of the key or value at fault; the
problems of one phase are reported together (values, then states, then bodies and transitions).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pydantic

from baf.core.agent import Agent
from baf.core.events import ReceiveJSONEvent, ReceiveTextEvent
from baf.core.intent import IntentParameter
from baf.core.state import State
from baf.core.transition import TransitionBuilder
from baf.declarative.actions import action_body
from baf.declarative.bodies import condition_from, steps_body
from baf.declarative.errors import Located, describe_validation_error
from baf.declarative.models import (
    ACTION_INPUTS,
    AgentFile,
    ConditionTrigger,
    FileTrigger,
    IntentTrigger,
    StateSpec,
    ToolSpec,
    TransitionSpec,
)
from baf.declarative.source import Marks, YAMLSourceError, read_yaml
from baf.declarative.templates import CompiledTemplate, compile_expression, compile_template
from baf.errors import AgentFileError, ConfigurationError
from baf.library.intents import LLMIntentClassifier
from baf.library.offline_llm import OfflineScriptLLM
from baf.library.state.reasoning_state_library import reasoning_body
from baf.llm.base import LLM
from baf.llm.openai_llm import LLMOpenAI

__all__ = ["build_agent", "load_agent", "parse_agent_file"]

PathKey = tuple[str | int, ...]


def load_agent(path: str | os.PathLike[str], *, log: str | None = None, llms: Mapping[str, LLM] | None = None) -> Agent:
    """Build the agent described by the YAML file at ``path``.

    ``log`` replaces the file's log URL; ``llms`` replaces models of the file's ``llms`` by name (a test
    passes scripted models). Raises :class:`~baf.errors.AgentFileError` listing every problem found.
    """
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    return build_agent(text, str(path), base=file.resolve().parent, log=log, llms=llms)


def parse_agent_file(text: str, where: str = "<agent>") -> tuple[AgentFile, Marks]:
    """Validate ``text`` as an agent file; :class:`AgentFileError` with each problem located."""
    try:
        data, marks = read_yaml(text)
    except YAMLSourceError as exc:
        raise AgentFileError(where, [("", exc.line, exc.column, exc.message)]) from None
    located = Located(where, marks)
    if not isinstance(data, dict):
        located.add((), f"the file must hold a mapping (name, states, ...), found {type(data).__name__}")
        located.raise_if_any()
    try:
        return AgentFile.model_validate(data), marks
    except pydantic.ValidationError as exc:
        for path, message, key in describe_validation_error(exc, data):
            located.add(path, message, key=key)
        located.raise_if_any()
        raise  # unreachable: a ValidationError always has errors


def build_agent(
    text: str,
    where: str = "<agent>",
    *,
    base: Path | None = None,
    log: str | None = None,
    llms: Mapping[str, LLM] | None = None,
) -> Agent:
    """Build an agent from the text of an agent file (``where`` names it in errors; ``base`` is the folder
    relative paths and imports start from)."""
    spec, marks = parse_agent_file(text, where)
    return _Builder(spec, Located(where, marks), base or Path.cwd(), log, dict(llms or {})).build()


class _Builder:
    def __init__(self, spec: AgentFile, located: Located, base: Path, log: str | None, llms: dict[str, LLM]) -> None:
        self.spec = spec
        self.located = located
        self.base = base
        self.log = log
        self.given_llms = llms
        self.llms: dict[str, LLM] = {}
        self.agent: Agent

    @contextlib.contextmanager
    def at(self, path: PathKey, *, key: bool = False) -> Iterator[None]:
        """Report a problem raised inside as one at ``path`` (and go on with the next item)."""
        try:
            yield
        except (ConfigurationError, ValueError, TypeError, ImportError, AttributeError, OSError) as exc:
            self.located.add(path, _message(exc), key=key)

    def build(self) -> Agent:
        spec = self.spec
        self.agent = Agent(spec.name, log=self.log or spec.log)
        self._values()
        self.located.raise_if_any()
        states = self._states()
        self.located.raise_if_any()
        for index, state_spec in enumerate(spec.states):
            state = states.get(state_spec.name)
            if state is not None:
                self._state_body(index, state_spec, state)
                self._transitions(index, state_spec, state, states)
        if not any(s.initial for s in spec.states):
            self.located.add(("states",), "no state is initial; mark one with 'initial: true'")
        self.located.raise_if_any()
        return self.agent

    # -- values: properties, models, tools, intents, platforms ------------------------------------

    def _values(self) -> None:
        spec, agent = self.spec, self.agent
        agent.set_properties(spec.properties)
        for name, llm_spec in spec.llms.items():
            with self.at(("llms", name), key=True):
                self.llms[name] = self._llm(name, llm_spec)
        for name in self.given_llms:
            if name not in spec.llms:
                self.located.add(("llms",), f"a model was given for {name!r}, which the file's llms do not name")
        for index, tool in enumerate(spec.tools):
            with self.at(("tools", index)):
                tool_spec = tool if isinstance(tool, ToolSpec) else ToolSpec.model_validate({"function": tool})
                function = self._import(tool_spec.function, "tool")
                policy = tool_spec.requires_approval
                if isinstance(policy, str):
                    policy = self._import(policy, "approval policy")
                agent.new_tool(function, name=tool_spec.name, description=tool_spec.description,
                               timeout=tool_spec.timeout, idempotent=tool_spec.idempotent,
                               requires_approval=policy)  # fmt: skip
        for index, workspace in enumerate(spec.workspaces):
            with self.at(("workspaces", index)):
                agent.new_workspace(self.base / workspace.path, name=workspace.name,
                                    description=workspace.description, writable=workspace.writable)  # fmt: skip
        for index, skill in enumerate(spec.skills):
            with self.at(("skills", index)):
                if skill.folder is not None:
                    agent.load_skills(self.base / skill.folder)
                else:
                    agent.new_skill(str(skill.name), str(skill.content), skill.description)
        for name, server in spec.mcp_servers.items():
            with self.at(("mcp_servers", name), key=True):
                headers = dict(server.headers)
                for header, variable in server.headers_env.items():
                    value = os.environ.get(variable)
                    if not value:
                        raise ConfigurationError(f"headers_env: {header} comes from {variable!r}, which is not set")
                    headers[header] = value
                    if len(value) >= 6:
                        agent.mark_secret(value)
                options = server.model_dump(exclude={"command", "headers", "headers_env", "cwd"}, exclude_none=True)
                if headers:
                    options["headers"] = headers
                if server.command is not None:
                    options["cwd"] = str(self.base / server.cwd) if server.cwd is not None else str(self.base)
                agent.add_mcp_server(name, server.command, **options)
        for name, intent in spec.intents.items():
            with self.at(("intents", name), key=True):
                parameters = [p if isinstance(p, str) else IntentParameter(p.name, p.fragment or "", p.description)
                              for p in intent.parameters]  # fmt: skip
                agent.new_intent(name, intent.training_sentences, parameters, intent.description)
        if spec.intent_classifier is not None and spec.intent_classifier.type == "llm":
            with self.at(("intent_classifier",)):
                llm = self._llm_named(spec.intent_classifier.llm, ("intent_classifier", "llm"))
                if llm is not None:
                    native = spec.intent_classifier.native_json
                    agent.set_intent_classifier(LLMIntentClassifier(llm, native_json=native))
        for index, platform in enumerate(spec.platforms):
            with self.at(("platforms", index)):
                options = platform.model_dump(exclude={"type", "auth_token_env"}, exclude_none=True)
                if platform.type == "terminal":
                    agent.use_terminal_platform(**options)
                else:
                    token_env = platform.auth_token_env
                    if token_env is not None:
                        token = os.environ.get(token_env)
                        if not token:
                            raise ConfigurationError(f"auth_token_env names {token_env!r}, which is not set")
                        options["auth_token"] = token
                        if len(token) >= 6:
                            agent.mark_secret(token)
                    agent.use_websocket_platform(**options)

    def _llm(self, name: str, spec: Any) -> LLM:
        if name in self.given_llms:
            return self.given_llms[name]
        key = os.environ.get(spec.api_key_env) or None
        if key is not None or spec.base_url is not None:
            if key is not None and len(key) >= 6:
                self.agent.mark_secret(key)
            return LLMOpenAI(spec.model, parameters=spec.parameters, base_url=spec.base_url, api_key=key,
                             timeout=spec.timeout, stream=spec.stream)  # fmt: skip
        if spec.offline_script is not None:
            return OfflineScriptLLM(spec.offline_script, name=f"offline:{spec.model}",
                                    hint=f"set {spec.api_key_env} to use {spec.model}")  # fmt: skip
        raise ConfigurationError(
            f"model {name!r} needs an API key: set {spec.api_key_env} (or give base_url for a local server, "
            "or offline_script to run offline)"
        )

    def _llm_named(self, name: str | None, path: PathKey) -> LLM | None:
        """The model called ``name`` (the only one when ``None``); a located problem if there is none."""
        if name is None:
            if len(self.llms) == 1:
                return next(iter(self.llms.values()))
            self.located.add(path, f"name a model of 'llms' (the file has {len(self.spec.llms)})")
            return None
        if name not in self.llms:
            known = ", ".join(self.spec.llms) or "none"
            self.located.add(path, f"no model named {name!r} under 'llms' (models: {known})")
            return None
        return self.llms[name]

    def _import(self, target: str, what: str) -> Any:
        module_name, _, attribute = target.partition(":")
        folder = str(self.base)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # the file's own modules, as a Python agent file would import them
        try:
            module = importlib.import_module(module_name)
            return getattr(module, attribute)
        except Exception as exc:  # an ImportError, or anything the module raised while importing
            raise ConfigurationError(f"cannot import {what} {target!r}: {type(exc).__name__}: {exc}") from None

    # -- states, bodies, transitions -----------------------------------------------------------------

    def _states(self) -> dict[str, State]:
        states: dict[str, State] = {}
        for index, state_spec in enumerate(self.spec.states):
            with self.at(("states", index, "initial" if state_spec.initial else "name")):
                states[state_spec.name] = self.agent.new_state(state_spec.name, initial=state_spec.initial)
        return states

    def _template(self, source: str, path: PathKey) -> CompiledTemplate | None:
        try:
            return compile_template(source, self.located.describe(path))
        except ValueError as exc:
            self.located.add(path, str(exc))
            return None

    def _state_body(self, index: int, spec: StateSpec, state: State) -> None:
        here: PathKey = ("states", index)
        if spec.global_intent is not None:
            with self.at((*here, "global")):
                state.set_global(spec.global_intent)
        if spec.fallback is not None:
            fallback = self._template(spec.fallback, (*here, "fallback"))
            if fallback is not None:
                state.set_fallback_body(steps_body({}, None, fallback))
        if spec.body is not None:
            with self.at((*here, "body")):
                state.set_body(self._import(spec.body, "body"))
        elif spec.reasoning is not None:
            reasoning = spec.reasoning
            llm = self._llm_named(reasoning.llm, (*here, "reasoning", "llm"))
            if llm is not None:
                options = reasoning.model_dump(exclude={"llm"}, exclude_none=True)
                with self.at((*here, "reasoning")):
                    state.set_body(reasoning_body(llm, **options))
        else:
            sets = {}
            for name, source in spec.set.items():
                compiled = self._template(source, (*here, "set", name))
                if compiled is not None:
                    sets[name] = compiled
            reply = self._template(spec.reply, (*here, "reply")) if spec.reply is not None else None
            action = self._action(index, spec) if spec.action is not None else None
            if sets or action is not None or reply is not None:
                state.set_body(steps_body(sets, action, reply))

    def _action(self, index: int, spec: StateSpec) -> Callable[..., Any] | None:
        here: PathKey = ("states", index, "with")
        model = ACTION_INPUTS[str(spec.action)]
        try:
            inputs = model.model_validate(spec.with_inputs or {})
        except pydantic.ValidationError as exc:
            for path, message, key in describe_validation_error(exc, spec.with_inputs or {}, model):
                self.located.add((*here, *path), message, key=key)
            return None
        problem_field = next(f for f in ("problem", "goal", "task") if f in type(inputs).model_fields)
        request = self._template(getattr(inputs, problem_field), (*here, problem_field))
        generator = getattr(inputs, "generator_model", None) or inputs.model
        llm = self._llm_named(generator, (*here, "generator_model" if getattr(inputs, "generator_model", None)
                                          else "model"))  # fmt: skip
        critic_name = getattr(inputs, "critic_model", None)
        critic = self._llm_named(critic_name, (*here, "critic_model")) if critic_name else None
        if request is None or llm is None or (critic_name and critic is None):
            return None
        with self.at(here):
            return action_body(str(spec.action), inputs, llm, request, self.agent, critic)
        return None

    def _transitions(self, index: int, spec: StateSpec, state: State, states: dict[str, State]) -> None:
        for number, transition in enumerate(spec.transitions):
            here: PathKey = ("states", index, "transitions", number)
            dest = states.get(transition.to)
            if dest is None:
                known = ", ".join(s.name for s in self.spec.states)
                self.located.add((*here, "to"), f"no state named {transition.to!r} (states: {known})")
                continue
            extra = None
            if transition.when is not None:
                extra = self._expression(transition.when, (*here, "when"))
                if extra is None:
                    continue
            with self.at((*here, "on")):
                if transition.on == "auto":  # right after the body; with 'when', once that holds
                    (state.when_condition(extra) if extra is not None else state).go_to(dest)
                    continue
                builder = self._trigger(transition, state, (*here, "on"))
                if builder is None:
                    continue
                if extra is not None:
                    builder.with_condition(extra)
                builder.go_to(dest)

    def _trigger(self, transition: TransitionSpec, state: State, path: PathKey) -> TransitionBuilder | None:
        on = transition.on
        if on == "text":
            return state.when_event(ReceiveTextEvent)
        if on == "json":
            return state.when_event(ReceiveJSONEvent)
        if on == "file":
            return state.when_file_received()
        if on == "any":
            return state.when_event()
        if on == "no_intent":
            return state.when_no_intent_matched()
        if isinstance(on, IntentTrigger):
            return state.when_intent_matched(on.intent)
        if isinstance(on, FileTrigger):
            return state.when_file_received(list(on.file))
        if isinstance(on, ConditionTrigger):
            condition = self._expression(on.condition, (*path, "condition"))
            return state.when_condition(condition) if condition is not None else None
        raise ConfigurationError(f"unknown trigger {on!r}")

    def _expression(self, source: str, path: PathKey) -> Callable[..., bool] | None:
        try:
            compiled = compile_expression(source, self.located.describe(path))
        except ValueError as exc:
            self.located.add(path, str(exc))
            return None
        return condition_from(compiled)


def _message(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, ConfigurationError | ValueError):
        return text
    return f"{type(exc).__name__}: {text}"
