"""The YAML agent file, as pydantic models: one source for validation, the JSON schema and the reference.

Every field's ``description`` is what ``docs/yaml_reference.md`` shows (``baf.declarative.reference``
writes that page) and what an editor shows from ``baf schema``. Each key maps onto one call of baf's
Python API; the description names it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ACTIONS",
    "ACTION_INPUTS",
    "AgentFile",
    "ClassifierSpec",
    "CoTInputs",
    "ConditionTrigger",
    "DecomposeInputs",
    "FewShotExample",
    "FileTrigger",
    "IntentSpec",
    "IntentTrigger",
    "LLMSpec",
    "MCPServerSpec",
    "ParameterSpec",
    "PlanExecuteInputs",
    "ReActInputs",
    "ReasoningSpec",
    "SelfCorrectInputs",
    "SkillSpec",
    "StateSpec",
    "TerminalSpec",
    "ToolSpec",
    "TransitionSpec",
    "TreeOfThoughtsInputs",
    "WebSocketSpec",
    "WorkspaceSpec",
]


class _Model(BaseModel):
    # Unknown keys are errors (a typo must not be ignored), and values are not coerced ("5" is not 5).
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False)


class LLMSpec(_Model):
    """A model served over the OpenAI chat-completions protocol (``baf.llm.openai_llm.LLMOpenAI``)."""

    model: str = Field(description="The model name sent to the server (`gpt-4o-mini`, `qwen2.5:7b`, ...).")
    base_url: str | None = Field(
        None, description="The server (`http://localhost:11434/v1`); default: `OPENAI_BASE_URL`, then OpenAI."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="The environment variable holding the API key (the key is never written in the file). "
        "A server at `base_url` that needs no key works without it.",
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict, description="Request fields sent with every call (`temperature`, `max_tokens`, ...)."
    )
    timeout: float = Field(60.0, gt=0, description="Seconds one attempt may take.")
    stream: bool = Field(
        False,
        description="Stream answers: platforms show each one as it is written (`reply_delta`); only the "
        "complete answer is recorded.",
    )
    offline_script: list[str] | None = Field(
        None,
        description="Answers an offline model (`baf.library.offline_llm.OfflineScriptLLM`) plays in order, one "
        "per call, when neither the key variable nor `base_url` is set: the file then runs offline (demos, "
        "tests); past the last answer a call fails as a model error. Without it a missing key is an error.",
    )


class ToolSpec(_Model):
    """A Python function registered as a tool (``agent.new_tool``)."""

    function: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="`module:function`, imported with the file's folder on the import path.",
    )
    name: str | None = Field(None, description="The tool's name for the model; default: the function's name.")
    description: str | None = Field(None, description="What the model is told; default: the docstring.")
    timeout: float | None = Field(None, gt=0, description="Seconds a call may take.")
    idempotent: bool = Field(False, description="Whether a call may be repeated safely (crash resume).")
    requires_approval: bool | str = Field(
        False,
        description="Each call waits for a human's approval (`true`), or a policy `module:function` "
        "`(session, call) -> bool` decides per call; see human_approval.md.",
    )

    @model_validator(mode="after")
    def _policy_reference(self) -> ToolSpec:
        policy = self.requires_approval
        if isinstance(policy, str) and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", policy):
            raise ValueError("requires_approval is true, false or a policy as `module:function`")
        return self


class WorkspaceSpec(_Model):
    """A folder the reasoning state may browse (``agent.new_workspace``)."""

    path: str = Field(description="The folder, relative to the agent file.")
    name: str = Field("workspace", description="The workspace's name (its tools are named after it).")
    description: str | None = Field(None, description="What the folder holds, for the model.")
    writable: bool = Field(False, description="Allow writes (read-only by default).")


class SkillSpec(_Model):
    """Instructions added to the reasoning system prompt (``agent.new_skill`` / ``agent.load_skills``).

    Either ``name`` and ``content``, or ``folder``."""

    name: str | None = Field(None, description="The skill's name.")
    content: str | None = Field(None, description="The instructions (Markdown).")
    description: str | None = Field(None, description="A one-line summary.")
    folder: str | None = Field(None, description="A folder of skills to load, relative to the agent file.")

    @model_validator(mode="after")
    def _one_form(self) -> SkillSpec:
        if self.folder is not None:
            if self.name is not None or self.content is not None:
                raise ValueError("a skill is either 'folder' or 'name' with 'content', not both")
        elif self.name is None or self.content is None:
            raise ValueError("a skill needs 'name' and 'content' (or 'folder')")
        return self


class MCPServerSpec(_Model):
    """An MCP server whose tools the agent offers as `NAME__tool` (``agent.add_mcp_server``; the `mcp`
    extra). Give `command` (stdio) or `url` (streamable HTTP)."""

    command: list[str] | None = Field(
        None, description="The server's command line (`[python, server.py]`), run in the agent file's folder."
    )
    url: str | None = Field(None, description="The URL of a streamable-HTTP server (`http://host/mcp`).")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent to a `url` server.")
    headers_env: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers whose values come from environment variables (`{Authorization: MCP_TOKEN}`): "
        "secrets stay out of the file.",
    )
    tools: list[str] | None = Field(None, description="Offer only these tools of the server (default: all).")
    prefix: str | None = Field(None, description="The tool-name prefix (default: `NAME__`).")
    timeout: float | None = Field(None, gt=0, description="Seconds a tool call may take.")
    env: dict[str, str] | None = Field(None, description="Environment variables for a `command` server.")
    cwd: str | None = Field(None, description="The folder a `command` server runs in, relative to the file.")
    start_timeout: float = Field(30.0, gt=0, description="Seconds the server may take to start.")
    max_restarts: int = Field(3, ge=0, description="Restarts after the server dies, at most.")
    requires_approval: bool = Field(False, description="Each call of the server's tools waits for a human's approval.")


class TerminalSpec(_Model):
    """The terminal chat (``agent.use_terminal_platform``)."""

    type: Literal["terminal"] = Field(description="`terminal`.")
    session_id: str = Field("terminal", description="The session id of the chat.")
    prompt: str = Field("you> ", description="The input prompt.")
    show_steps: bool = Field(True, description="Show reasoning steps as they happen.")


class WebSocketSpec(_Model):
    """The WebSocket server and browser UI (``agent.use_websocket_platform``; the `web` extra)."""

    type: Literal["websocket"] = Field(description="`websocket`.")
    host: str = Field("127.0.0.1", description="The address to listen on.")
    port: int = Field(8765, ge=0, le=65535, description="The port.")
    ui: bool = Field(True, description="Serve the browser UI at `http://HOST:PORT/`.")
    auth_token_env: str | None = Field(
        None, description="An environment variable holding the token clients must present."
    )
    allowed_origins: list[str] | None = Field(None, description="Origins a browser may connect from.")


PlatformSpec = Annotated[TerminalSpec | WebSocketSpec, Field(discriminator="type")]


class ParameterSpec(_Model):
    """A value extracted from a message that matches an intent (``IntentParameter``)."""

    name: str = Field(description="The parameter's name (`session.event.predicted_intent.parameters[name]`).")
    fragment: str | None = Field(
        None, description="The placeholder written in the training sentences; default: the name in upper case."
    )
    description: str = Field("", description="What the value is, for a model-based classifier.")


class IntentSpec(_Model):
    """An intent (``agent.new_intent``); its name is its key under `intents`."""

    training_sentences: list[str] = Field(
        default_factory=list, description="Examples of what a user would write (at least one)."
    )
    parameters: list[ParameterSpec | str] = Field(
        default_factory=list, description="Values to extract: names, or `{name, fragment, description}`."
    )
    description: str = Field("", description="What the intent means, for a model-based classifier.")


class ClassifierSpec(_Model):
    """The intent classifier (``agent.set_intent_classifier``). The threshold is the property
    `nlp.intent_threshold` (under `properties`)."""

    type: Literal["word_overlap", "llm"] = Field(
        "word_overlap",
        description="`word_overlap`: offline, no model (the default). `llm`: one model call per message "
        "(`baf.library.intents.LLMIntentClassifier`).",
    )
    llm: str | None = Field(None, description="For `llm`: the name of an entry of `llms` (default: the only one).")
    native_json: bool = Field(False, description="For `llm`: also send a JSON-schema `response_format`.")


class IntentTrigger(_Model):
    """`on: {intent: NAME}`: a text message the classifier reads as the intent (``when_intent_matched``)."""

    intent: str = Field(description="The intent's name (a key of `intents`).")


class ConditionTrigger(_Model):
    """`on: {condition: EXPR}`: an automatic transition, taken once the expression is true
    (``when_condition``), checked after each body and each variable change."""

    condition: str = Field(description="A Jinja2 expression over `session`, `event` (`session.count > 3`).")


class FileTrigger(_Model):
    """`on: {file: [TYPES]}`: a file of these MIME types or extensions (``when_file_received``)."""

    file: list[str] = Field(description="MIME types (`image/*`, `application/pdf`) or extensions (`.csv`).")


Trigger = Literal["text", "json", "file", "any", "no_intent", "auto"] | IntentTrigger | ConditionTrigger | FileTrigger


class TransitionSpec(_Model):
    """A transition (``state.when_...().go_to(dest)``), tried in the order written."""

    on: Trigger = Field(
        description="What triggers it: `text`, `json`, `file` (any file), `any` (any event: ``when_event()``), "
        "`no_intent` (``when_no_intent_matched``), `auto` (right after the body: ``go_to``), "
        "`{intent: NAME}`, `{condition: EXPR}` or `{file: [TYPES]}`."
    )
    to: str = Field(description="The name of the destination state.")
    when: str | None = Field(
        None, description="An extra condition, a Jinja2 expression that must be true (``with_condition``)."
    )


class ReasoningSpec(_Model):
    """The reasoning state's body (``reasoning_body``): an LLM-driven tool loop that answers each message."""

    llm: str | None = Field(None, description="The name of an entry of `llms` (default: the only one).")
    max_steps: int = Field(8, ge=1, description="Model turns allowed per message.")
    system_prompt: str | None = Field(None, description="The base system prompt (default: baf's).")
    fallback_message: str | None = Field(None, description="The reply when `max_steps` runs out.")
    enable_task_planning: bool = Field(True, description="Offer the planning tools (false: a pure ReAct loop).")
    stream_steps: bool = Field(True, description="Stream reasoning steps to the platform.")
    memory: int | None = Field(10, ge=0, description="Earlier exchanges the model sees (null: all).")
    tool_timeout: float = Field(60.0, gt=0, description="Seconds a tool call may take (without its own timeout).")
    max_parallel_tools: int = Field(8, ge=1, description="Tool calls of one turn run at once.")
    max_tool_output: int = Field(20_000, ge=1, description="Characters of a tool result the model sees.")
    parameters: dict[str, Any] = Field(default_factory=dict, description="Extra request fields for each call.")


ACTIONS = ("reason.cot", "reason.react", "reason.self_correct", "reason.decompose", "reason.plan_execute",
           "reason.tree_of_thoughts")  # fmt: skip

#: The Edge Agent's inputs that baf names differently or not at all, with what to write instead.
_TEA_HINTS = {
    "output_format": "baf's ReAct output is fixed (see react_steps); leave output_format out",
    "critic_prompt": "write prompts: {critique: '... {task} ... {answer} ...'} (baf's prompt slot and fields)",
    "synthesis_prompt": "write prompts: {synthesize: '...'} (baf's prompt slot for the synthesis)",
}


class _ActionInputs(_Model):
    model: str | None = Field(None, description="The name of an entry of `llms` (default: the only one).")
    max_steps: int | None = Field(None, ge=1, description="The pattern's step guard (default: the pattern's).")
    step_timeout: float | None = Field(None, gt=0, description="Seconds one model call may take.")
    prompts: dict[str, str] = Field(
        default_factory=dict, description="Prompt overrides by slot (see docs/reasoning_patterns.md)."
    )
    native_structured: bool | None = Field(None, description="Send a JSON-schema `response_format`.")
    stream_steps: bool = Field(True, description="Stream the pattern's steps to the platform.")

    @model_validator(mode="before")
    @classmethod
    def _tea_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, hint in _TEA_HINTS.items():
                if key in data:
                    raise ValueError(f"'{key}' is The Edge Agent's; in baf {hint}")
        return data


class FewShotExample(_Model):
    """A worked example shown to Chain of Thought."""

    problem: str = Field(description="The example problem.")
    thinking: str = Field(description="Its reasoning.")
    answer: str = Field(description="Its answer.")


class CoTInputs(_ActionInputs):
    """`reason.cot` → ``ChainOfThought``."""

    problem: str = Field(description="The problem, a template (`{{ state.math_problem }}`).")
    thinking_format: Literal["step_by_step", "pros_cons", "first_principles"] = Field(
        "step_by_step", description="How to think (TEA's `tree` is `reason.tree_of_thoughts` here)."
    )
    few_shot_examples: list[FewShotExample] = Field(default_factory=list, description="Worked examples.")


class ReActInputs(_ActionInputs):
    """`reason.react` → ``ReAct``."""

    goal: str = Field(description="The goal, a template.")
    tools: list[str] | None = Field(None, description="Names of the agent's tools to offer (default: all).")
    termination: Literal["tool", "confidence", "hybrid"] = Field(
        "tool", description="How the loop ends: a `final_answer` tool call, a confident thought, or either."
    )


class SelfCorrectInputs(_ActionInputs):
    """`reason.self_correct` → ``Reflexion``."""

    task: str = Field(description="The task, a template.")
    generator_model: str | None = Field(None, description="The `llms` entry that answers (same as `model`).")
    critic_model: str | None = Field(None, description="The `llms` entry that critiques (default: the generator).")
    improvement_rounds: int = Field(2, ge=1, description="Answer-critique rounds at most.")


class DecomposeInputs(_ActionInputs):
    """`reason.decompose` → ``GoalDecomposition``."""

    problem: str = Field(description="The problem, a template.")
    max_depth: int = Field(2, ge=1, description="How deep tasks may be decomposed again.")


class PlanExecuteInputs(_ActionInputs):
    """`reason.plan_execute` → ``PlanAndExecute``."""

    goal: str = Field(description="The goal, a template.")
    allow_replan: bool = Field(False, description="Revise the plan when a step fails.")
    max_replans: int = Field(2, ge=0, description="Revisions allowed.")


class TreeOfThoughtsInputs(_ActionInputs):
    """`reason.tree_of_thoughts` → ``TreeOfThoughts``."""

    problem: str = Field(description="The problem, a template.")
    branching_factor: int = Field(3, ge=1, description="Candidates per level.")
    max_depth: int = Field(3, ge=1, description="Levels at most.")
    good_enough: float = Field(0.95, ge=0, le=1, description="A score that ends the search early.")


#: The inputs model of each action.
ACTION_INPUTS: dict[str, type[_ActionInputs]] = {
    "reason.cot": CoTInputs,
    "reason.react": ReActInputs,
    "reason.self_correct": SelfCorrectInputs,
    "reason.decompose": DecomposeInputs,
    "reason.plan_execute": PlanExecuteInputs,
    "reason.tree_of_thoughts": TreeOfThoughtsInputs,
}


class StateSpec(_Model):
    """A state (``agent.new_state``). Its body is one of `body`, `reasoning`, or the sequence
    `set` → `action` → `reply` (each optional); with none the state does nothing when entered."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field(min_length=1, description="The state's name, unique in the agent.")
    initial: bool = Field(False, description="The state sessions start in (exactly one).")
    global_intent: str | None = Field(
        None,
        alias="global",
        description="Make this a global state reached by this intent from every state (``state.set_global``); "
        "when its component ends, the session returns to where the user was.",
    )
    body: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="A Python body, `module:function(session)`."
    )
    reasoning: ReasoningSpec | None = Field(None, description="Make this a reasoning state.")
    set: dict[str, str] = Field(
        default_factory=dict, description="Variables to set on entry, each from a template (`{{ event.text }}`)."
    )
    action: Literal[ACTIONS] | None = Field(  # type: ignore[valid-type]
        None, description="A reasoning action (TEA's `reason.*`), run on entry with the inputs of `with`."
    )
    with_inputs: dict[str, Any] | None = Field(
        None, alias="with", description="The action's inputs (see the per-action tables below)."
    )
    reply: str | None = Field(None, description="A reply sent on entry, a template (`Hello {{ session.name }}`).")
    fallback: str | None = Field(
        None, description="The reply, a template, when a message matches no transition (``set_fallback_body``)."
    )
    transitions: list[TransitionSpec] = Field(default_factory=list, description="Where the state may go next.")

    @model_validator(mode="after")
    def _one_body(self) -> StateSpec:
        steps = bool(self.set) or self.action is not None or self.reply is not None
        kinds = [k for k, used in (("body", self.body is not None), ("reasoning", self.reasoning is not None),
                                   ("set/action/reply", steps)) if used]  # fmt: skip
        if len(kinds) > 1:
            raise ValueError(f"a state has one body; this one has {' and '.join(kinds)}")
        if self.with_inputs is not None and self.action is None:
            raise ValueError("'with' gives an action's inputs; this state has no 'action'")
        if self.action is not None and self.with_inputs is None:
            raise ValueError(f"action {self.action} needs its inputs under 'with'")
        return self


class AgentFile(_Model):
    """A baf agent (``baf.Agent``)."""

    name: str = Field(min_length=1, description="The agent's name.")
    log: str = Field("sqlite:///baf.db", description="The session log URL (`sqlite:///file.db`, `memory://`).")
    properties: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings; nested keys become dotted names (`nlp: {intent_threshold: 0.6}`) (``set_property``).",
    )
    llms: dict[str, LLMSpec] = Field(default_factory=dict, description="Models by name.")
    tools: list[ToolSpec | Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]] = Field(
        default_factory=list, description="Tools: `module:function`, or `{function, name, description, ...}`."
    )
    workspaces: list[WorkspaceSpec] = Field(default_factory=list, description="Folders the reasoning state may use.")
    skills: list[SkillSpec] = Field(default_factory=list, description="Skills for the reasoning system prompt.")
    mcp_servers: dict[str, MCPServerSpec] = Field(
        default_factory=dict, description="MCP servers whose tools the agent offers, by name."
    )
    platforms: list[PlatformSpec] = Field(
        default_factory=list, description="Where the agent talks (`baf run` adds the terminal when empty)."
    )
    intents: dict[str, IntentSpec] = Field(default_factory=dict, description="Intents by name.")
    intent_classifier: ClassifierSpec | None = Field(None, description="The intent classifier (default: offline).")
    states: list[StateSpec] = Field(min_length=1, description="The states, in order.")
