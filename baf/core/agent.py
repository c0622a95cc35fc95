"""The agent: a state machine of states, the tools its states may use, and the platforms it talks on.

An ``Agent`` is the definition. :class:`~baf.core.runtime.Runtime` runs it; ``async with agent:``,
``agent.start()``/``stop()``, ``agent.run()`` and the ``receive_*`` methods are sugar over one runtime the
agent owns, started with the agent's ``log`` and ``max_body_threads``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import logging
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, overload

import yaml

from baf.core.agent_file import agent_file_being_loaded
from baf.core.cache import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSIONS
from baf.core.events import Event
from baf.core.hooks import HookChain, StepHooks
from baf.core.intent import Intent, IntentParameter
from baf.core.intent_classifier import IntentClassifier, WordOverlapClassifier
from baf.core.runtime import DEFAULT_SNAPSHOT_EVERY, STOP_GRACE_PERIOD, Runtime, is_running
from baf.core.session import Session
from baf.core.state import State
from baf.errors import ConfigurationError
from baf.log import SessionLog, open_log
from baf.log.redaction import Redactor, log_exception
from baf.reasoning.skill import Skill
from baf.reasoning.tool import Tool
from baf.reasoning.toolset import Toolset
from baf.reasoning.workspace import Workspace

if TYPE_CHECKING:
    from baf.core.platform import Platform
    from baf.platforms.a2a import A2APlatform
    from baf.platforms.telegram import TelegramPlatform
    from baf.platforms.terminal import TerminalPlatform
    from baf.platforms.websocket import WebSocketPlatform
    from baf.reasoning.mcp import MCPToolset

__all__ = ["Agent"]

logger = logging.getLogger("baf.agent")


class Agent:
    """An agent: states wired by transitions, run over an append-only session log.

    ``log`` is a URL (``sqlite:///baf.db``, ``sqlite:///baf.db?durability=full``, ``memory://``) or a
    :class:`~baf.log.SessionLog`. ``max_body_threads`` bounds how many synchronous bodies and tools run
    at once in worker threads. Idle sessions are dropped from memory beyond ``max_sessions``, or after
    ``session_idle_seconds`` unused, and loaded again from the log on their next use; a session gets a
    snapshot record every ``snapshot_every`` records (``None``: never) so it loads in bounded time.
    These configure the runtime the agent starts for itself (:meth:`start`); a
    :class:`~baf.core.runtime.Runtime` built directly defaults to them and may be given others.
    """

    def __init__(
        self,
        name: str,
        log: str | SessionLog = "sqlite:///baf.db",
        *,
        max_body_threads: int = 64,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_idle_seconds: float = DEFAULT_IDLE_SECONDS,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        if not name:
            raise ConfigurationError("an agent needs a name")
        self.name = name
        #: The log the agent's own runtime runs over.
        self.log: SessionLog = open_log(log)
        #: How many sync bodies (and, apart, sync tools) the agent's own runtime runs at once.
        self.max_body_threads = max_body_threads
        #: Idle sessions a runtime keeps in memory (least recently used dropped first).
        self.max_sessions = max_sessions
        #: Seconds an unused session stays in memory.
        self.session_idle_seconds = session_idle_seconds
        #: Records between a session's snapshots (``None``: no snapshots).
        self.snapshot_every = snapshot_every
        self._states: dict[str, State] = {}
        self._platforms: list[Platform] = []
        self._properties: dict[str, Any] = {}
        self._tools: dict[str, Tool] = {}
        self._skills: dict[str, Skill] = {}
        self._workspaces: dict[str, Workspace] = {}
        self._toolsets: dict[str, Toolset] = {}
        self._intents: dict[str, Intent] = {}
        self._global_states: dict[str, State] = {}
        self._intent_classifier: IntentClassifier = WordOverlapClassifier()
        self._hooks = HookChain()
        self._runtime: Runtime | None = None  # the runtime start() made, until stop()
        #: Replaces secret values in every record at write time (API keys from the environment and
        #: LLM clients, and values marked with :meth:`mark_secret`).
        self.redactor = Redactor.from_environment()
        self._stop_requested: asyncio.Event | None = None
        self._stopping: Runtime | None = None
        self._first_signal: str | None = None  # the signal that asked run() to stop, by its name

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, states={list(self._states)})"

    # -- states ---------------------------------------------------------------------------------

    def new_state(self, name: str, initial: bool = False) -> State:
        """Create a state. Names are unique; exactly one state is initial."""
        self._check_mutable("add a state")
        if not name:
            raise ConfigurationError("a state needs a name")
        if name in self._states:
            raise ConfigurationError(f"agent {self.name!r} already has a state named {name!r}")
        if initial:
            current = next((s for s in self._states.values() if s.initial), None)
            if current is not None:
                raise ConfigurationError(
                    f"agent {self.name!r} already has an initial state ({current.name!r}); "
                    f"{name!r} cannot be initial too"
                )
        state = State(self, name, initial)
        self._states[name] = state
        return state

    @property
    def states(self) -> list[State]:
        """The states, in creation order."""
        return list(self._states.values())

    @property
    def state_names(self) -> set[str]:
        """The names of the states."""
        return set(self._states)

    def get_state(self, name: str) -> State:
        """The state called ``name``."""
        try:
            return self._states[name]
        except KeyError:
            raise ConfigurationError(f"agent {self.name!r} has no state named {name!r}") from None

    @property
    def initial_state(self) -> State:
        """The initial state; a clear error if none was declared."""
        for state in self._states.values():
            if state.initial:
                return state
        raise ConfigurationError(
            f"agent {self.name!r} has no initial state; create one with new_state(name, initial=True)"
        )

    def _check_mutable(self, what: str) -> None:
        if is_running(self):
            raise ConfigurationError(f"cannot {what} while agent {self.name!r} is running; do it before start()")

    # -- intents --------------------------------------------------------------------------------

    def new_intent(
        self,
        name: str,
        training_sentences: Sequence[str],
        parameters: Sequence[IntentParameter | str | Mapping[str, Any]] | None = None,
        description: str | None = None,
    ) -> Intent:
        """Declare an intent: what a user may mean, shown by example sentences.

        ``parameters`` are values to extract (names, or :class:`~baf.core.intent.IntentParameter` with
        the placeholder written in the sentences: ``"book a table for PEOPLE"``). ``description`` helps a
        model-based classifier. Names are unique; an intent without training sentences is refused.
        """
        self._check_mutable("add an intent")
        if name in self._intents:
            raise ConfigurationError(f"agent {self.name!r} already has an intent named {name!r}")
        intent = Intent.build(name, training_sentences, parameters, description)
        self._intents[name] = intent
        return intent

    @property
    def intents(self) -> Mapping[str, Intent]:
        """The declared intents by name, read-only."""
        return MappingProxyType(self._intents)

    def get_intent(self, name: str) -> Intent:
        """The intent called ``name``."""
        try:
            return self._intents[name]
        except KeyError:
            raise ConfigurationError(f"agent {self.name!r} has no intent named {name!r}") from None

    @property
    def global_states(self) -> Mapping[str, State]:
        """The global states by the name of the intent that reaches them, read-only."""
        return MappingProxyType(self._global_states)

    @property
    def global_state_names(self) -> set[str]:
        """The names of the global states."""
        return {state.name for state in self._global_states.values()}

    def _add_global_state(self, state: State, intent: Intent) -> None:
        self._check_mutable("add a global state")
        claimed = self._global_states.get(intent.name)
        if claimed is not None and claimed is not state:
            raise ConfigurationError(
                f"intent {intent.name!r} already leads to global state {claimed.name!r}; "
                f"{state.name!r} cannot claim it too (one intent reaches one global state)"
            )
        self._global_states[intent.name] = state

    @property
    def intent_classifier(self) -> IntentClassifier:
        """The classifier that reads text messages in states that route by intent.

        By default the offline :class:`~baf.core.intent_classifier.WordOverlapClassifier`; for free text
        use ``baf.library.intents.LLMIntentClassifier``.
        """
        return self._intent_classifier

    def set_intent_classifier(self, classifier: IntentClassifier) -> None:
        """Use ``classifier`` (anything with a ``name`` and ``async classify(text, intents)``)."""
        self._check_mutable("change the intent classifier")
        if not isinstance(classifier, IntentClassifier):
            raise ConfigurationError(
                "an intent classifier needs a name and 'async classify(text, intents)'; "
                f"got {type(classifier).__name__}"
            )
        self._intent_classifier = classifier

    # -- platforms and hooks --------------------------------------------------------------------

    def add_platform(self, platform: Platform) -> Platform:
        """Attach a platform; it is started and stopped with the agent."""
        self._check_mutable("add a platform")
        platform.bind(self)
        self._platforms.append(platform)
        return platform

    def use_terminal_platform(self, **options: Any) -> TerminalPlatform:
        """Attach the terminal (rich) chat platform."""
        from baf.platforms.terminal import TerminalPlatform

        platform = TerminalPlatform(**options)
        self.add_platform(platform)
        return platform

    def use_websocket_platform(self, **options: Any) -> WebSocketPlatform:
        """Attach the WebSocket platform (the ``web`` extra: ``pip install -e ".[web]"`` in a clone). With ``ui=True``
        (the default) it also serves the browser UI at http://localhost:PORT/."""
        from baf.platforms.websocket import WebSocketPlatform

        platform = WebSocketPlatform(**options)
        self.add_platform(platform)
        return platform

    def use_telegram_platform(self, token: str, **options: Any) -> TelegramPlatform:
        """Attach a Telegram bot (the ``telegram`` extra); options as for
        :class:`~baf.platforms.telegram.TelegramPlatform`."""
        from baf.platforms.telegram import TelegramPlatform

        platform = TelegramPlatform(token, **options)
        self.add_platform(platform)
        return platform

    def use_a2a_platform(self, host: str = "127.0.0.1", port: int = 9000, **options: Any) -> A2APlatform:
        """Serve the agent over A2A (the ``a2a`` extra); options as for
        :class:`~baf.platforms.a2a.A2APlatform`."""
        from baf.platforms.a2a import A2APlatform

        platform = A2APlatform(host, port, **options)
        self.add_platform(platform)
        return platform

    @property
    def platforms(self) -> tuple[Platform, ...]:
        """The attached platforms."""
        return tuple(self._platforms)

    def find_platform(self, name: str) -> Platform | None:
        """The attached platform called ``name``, if any."""
        return next((p for p in self._platforms if p.name == name), None)

    def add_hook(self, hook: StepHooks) -> StepHooks:
        """Attach engine-step hooks (see :class:`~baf.core.hooks.StepHooks`)."""
        self._hooks.hooks.append(hook)
        return hook

    @property
    def hooks(self) -> HookChain:
        """The engine-step hooks attached with :meth:`add_hook`, as one hook calling them in order."""
        return self._hooks

    def mark_secret(self, value: str) -> None:
        """Never write ``value`` to the log: it is replaced by ``[REDACTED]`` in every record (and so in
        replay output and exports). Values shorter than 6 characters are refused."""
        self.redactor.add(value)

    # -- properties -----------------------------------------------------------------------------

    def load_properties(self, path: str | Path) -> None:
        """Load a YAML file of settings; nested keys become dotted names (``llm.openai.api_key``)."""
        text = Path(path).read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"cannot parse properties file {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigurationError(f"properties file {path} must hold a mapping at the top level")
        self.set_properties(data)

    def set_properties(self, data: Mapping[str, Any]) -> None:
        """Set every property of ``data``; nested mappings become dotted names (``{"nlp": {"x": 1}}`` sets
        ``nlp.x``), as in a properties file."""
        for name, value in _flatten(data).items():
            self.set_property(name, value)

    def get_property(self, name: str, default: Any = None) -> Any:
        """The value of property ``name``, or ``default``."""
        return self._properties.get(name, default)

    def set_property(self, name: str, value: Any) -> None:
        """Set property ``name``."""
        self._properties[name] = value

    @property
    def properties(self) -> Mapping[str, Any]:
        """All properties, read-only."""
        return MappingProxyType(self._properties)

    # -- tools, skills, workspaces --------------------------------------------------------------

    def add_tool(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (a :class:`~baf.reasoning.tool.Tool` or a plain function)."""
        if not isinstance(tool, Tool):
            tool = Tool(tool)
        if tool.name in self._tools:
            raise ConfigurationError(f"agent {self.name!r} already has a tool named {tool.name!r}")
        owner = next((t for t in self._toolsets.values() if tool.name.startswith(t.prefix)), None)
        if owner is not None:
            raise ConfigurationError(f"agent {self.name!r}: tool name {tool.name!r} is in the namespace of "
                                     f"toolset {owner.name!r}; rename the tool")  # fmt: skip
        self._tools[tool.name] = tool
        return tool

    def add_a2a_agent(self, url: str, name: str, **options: Any) -> Tool:
        """Make the A2A agent served at ``url`` a tool called ``name`` (the ``a2a`` extra); options
        (``description``, ``timeout``, ``headers``, ``auth_token``) as for :func:`~baf.reasoning.a2a.a2a_agent_tool`."""
        from baf.reasoning.a2a import a2a_agent_tool

        return self.add_tool(a2a_agent_tool(url, name, **options))

    def add_mcp_server(self, name: str, command: list[str] | None = None, **options: Any) -> MCPToolset:
        """Offer the tools of an MCP server (the ``mcp`` extra): a stdio server started with ``command``
        (``["python", "server.py"]``), or a streamable-HTTP one at ``url="http://.../mcp"`` (with
        ``headers=``). ``tools=[...]`` picks tools, ``prefix=`` renames their namespace (``name__`` by
        default); see :class:`~baf.reasoning.mcp.MCPToolset` for every option and ``docs/mcp.md``."""
        from baf.reasoning.mcp import MCPToolset

        toolset = MCPToolset(name, command, **options)
        self.add_toolset(toolset)
        return toolset

    def add_toolset(self, toolset: Toolset) -> Toolset:
        """Attach a :class:`~baf.reasoning.toolset.Toolset`: started and stopped with each runtime, its
        tools offered next to the agent's own while it is started."""
        self._check_mutable("add a toolset")
        if toolset.name in self._toolsets:
            raise ConfigurationError(f"agent {self.name!r} already has a toolset named {toolset.name!r}")
        prefix = toolset.prefix
        taken = [repr(n) for n in self._tools if n.startswith(prefix)]
        taken += [f"toolset {t.name!r}" for t in self._toolsets.values()
                  if t.prefix.startswith(prefix) or prefix.startswith(t.prefix)]  # fmt: skip
        if taken:
            raise ConfigurationError(
                f"agent {self.name!r}: toolset {toolset.name!r} would share its tool-name namespace ({prefix!r}) "
                f"with {', '.join(taken)}; give it another prefix"
            )
        self._toolsets[toolset.name] = toolset
        return toolset

    def new_tool(
        self, fn: Callable[..., Any], name: str | None = None, description: str | None = None, **options: Any
    ) -> Tool:
        """Wrap ``fn`` as a tool and register it."""
        return self.add_tool(Tool(fn, name=name, description=description, **options))

    @overload
    def tool(self, fn: Callable[..., Any], /) -> Tool: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
        requires_approval: bool | Callable[[Any, Any], bool] = False,
    ) -> Callable[[Callable[..., Any]], Tool]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        idempotent: bool = False,
        requires_approval: bool | Callable[[Any, Any], bool] = False,
    ) -> Tool | Callable[[Callable[..., Any]], Tool]:
        """Decorator registering a function as a tool: ``@agent.tool`` or ``@agent.tool(timeout=5)``;
        ``@agent.tool(requires_approval=True)`` makes each call wait for a human decision (see
        :class:`~baf.reasoning.tool.Tool` and ``docs/human_approval.md``)."""

        def register(function: Callable[..., Any]) -> Tool:
            return self.add_tool(Tool(function, name, description, timeout=timeout, idempotent=idempotent,
                                      requires_approval=requires_approval))  # fmt: skip

        return register(fn) if fn is not None else register

    def load_tools(self, path: str | Path) -> list[Tool]:
        """Import a Python file and register its tools: the names in its ``__all__`` if it has one,
        else every public function defined in it (and every ``Tool`` object)."""
        path = Path(path)
        module_name = f"baf_tools_{path.stem}_{abs(hash(path.resolve()))}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ConfigurationError(f"cannot import tools from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        loaded = []
        for attr in names:
            value = getattr(module, attr)
            if isinstance(value, Tool) or (inspect.isfunction(value) and value.__module__ == module_name):
                loaded.append(self.add_tool(value))
        return loaded

    def new_skill(self, name: str, content: str, description: str | None = None) -> Skill:
        """Register a skill: instructions (Markdown) added to the reasoning system prompt."""
        return self._add_skill(Skill(name, content, description))

    def load_skills(self, folder: str | Path) -> list[Skill]:
        """Register every skill found in ``folder``."""
        return [self._add_skill(skill) for skill in Skill.from_folder(folder)]

    def _add_skill(self, skill: Skill) -> Skill:
        if skill.name in self._skills:
            raise ConfigurationError(f"agent {self.name!r} already has a skill named {skill.name!r}")
        self._skills[skill.name] = skill
        return skill

    def new_workspace(self, path: str | Path, name: str = "workspace", **options: Any) -> Workspace:
        """Register a folder the reasoning state may browse (read-only unless ``writable=True``)."""
        if name in self._workspaces:
            raise ConfigurationError(f"agent {self.name!r} already has a workspace named {name!r}")
        workspace = Workspace(path, name=name, **options)
        self._workspaces[name] = workspace
        return workspace

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools by name, read-only: the registered ones, then those of the started toolsets."""
        if not self._toolsets:
            return MappingProxyType(self._tools)
        merged = dict(self._tools)
        for toolset in self._toolsets.values():
            merged.update(toolset.tools)
        return MappingProxyType(merged)

    @property
    def toolsets(self) -> tuple[Toolset, ...]:
        """The attached toolsets (MCP servers), in the order added."""
        return tuple(self._toolsets.values())

    @property
    def skills(self) -> Mapping[str, Skill]:
        """Registered skills by name, read-only."""
        return MappingProxyType(self._skills)

    @property
    def workspaces(self) -> Mapping[str, Workspace]:
        """Registered workspaces by name, read-only."""
        return MappingProxyType(self._workspaces)

    # -- running --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the agent has been started and not stopped."""
        return self._runtime is not None

    @property
    def runtime(self) -> Runtime:
        """The runtime :meth:`start` made for the agent (a clear error if it is not running)."""
        return self._require_runtime()

    @property
    def sessions(self) -> Mapping[str, Session]:
        """The sessions the agent's runtime holds in memory now, by id, read-only."""
        return self._require_runtime().sessions

    async def start(self, runtime: Runtime | None = None) -> None:
        """Start a runtime for the agent over its ``log`` (see :class:`~baf.core.runtime.Runtime`), then
        the platforms. ``runtime`` starts that one instead (built for this agent, not started yet): how
        ``baf.serve`` runs the agent as one worker among many."""
        if self._runtime is not None:
            return
        _ = self.initial_state  # fail early with a clear message
        for tool in self._tools.values():
            _ = tool.schema  # built now, not at the first request: a type it cannot take fails the start
        if runtime is not None and runtime.agent is not self:
            raise ConfigurationError(f"that runtime runs agent {runtime.agent.name!r}, not {self.name!r}")
        runtime = runtime or Runtime(self, self.log, max_body_threads=self.max_body_threads)
        self._runtime = runtime
        try:
            await runtime.start()
            for platform in self._platforms:
                await platform.start()
        except BaseException:
            self._runtime = None
            await runtime.stop()
            raise

    async def stop(self) -> None:
        """Stop the platforms, let running steps finish, flush and close the log.

        Running steps get up to ``STOP_GRACE_PERIOD`` (10) seconds; :meth:`interrupt` ends the wait.
        """
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        self._stopping = runtime  # interrupt() (a second Ctrl-C) still reaches it
        try:
            for platform in reversed(self._platforms):
                try:
                    await platform.stop()
                except Exception:
                    log_exception(logger, self.redactor, "platform %s failed to stop", platform.name)
            await runtime.stop()
        finally:
            self._stopping = None

    def interrupt(self) -> None:
        """Stop now: do not wait for the running steps (what a second Ctrl-C does under :meth:`run`).

        Each step still running is cancelled and recorded as interrupted by the user. Called while
        :meth:`stop` runs, or once :meth:`run` was asked to stop (its first Ctrl-C, :meth:`request_stop`)
        and before it stops, it also makes that stop return without waiting out its grace period, and
        start no further step. On a running agent that is not stopping it only cancels the steps running
        now: the agent goes on, later events still run, and a later :meth:`stop` is graceful as usual.
        Call it on the event loop's thread (from another thread, use
        ``loop.call_soon_threadsafe(agent.interrupt)``). Does nothing if the agent is not running.

        A sync body (or sync tool) still running is abandoned, as a thread cannot be killed: it does not
        keep the process alive. If the agent is stopping, what it records or replies afterwards fails with
        ``LogClosedError``; if not, that still reaches its session, after the step recorded as interrupted.
        """
        self._interrupt("Agent.interrupt()")

    def _interrupt(self, how: str) -> None:
        runtime = self._runtime or self._stopping
        if runtime is not None:
            # A stop is pending once run() was asked to stop, even if stop() has not begun yet.
            stop_pending = self._stopping is not None or (
                self._stop_requested is not None and self._stop_requested.is_set()
            )
            runtime.interrupt(how, stop_pending=stop_pending)

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def run(self) -> None:
        """Start, serve until Ctrl-C / SIGTERM (or a platform asks to stop), then stop cleanly.

        Stopping lets the running steps finish, for up to ``STOP_GRACE_PERIOD`` (10) seconds; a second
        Ctrl-C (or SIGTERM) stops at once, as :meth:`interrupt` does, recording the steps still running
        as interrupted by the user, with the signal in the message.

        If the application has not set up :mod:`logging`, baf's INFO lines (a platform saying where it
        listens) are shown on stderr.

        ``ConfigurationError`` if called while ``baf run`` or ``baf serve`` imports the file that calls
        it: those commands run the agent themselves (call it under ``if __name__ == "__main__":``).
        """
        _refuse_while_loaded_by_baf()
        _show_baf_log_lines()
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        self._first_signal = None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            async with self:
                await self._stop_requested.wait()
        finally:
            self._stop_requested = None  # a later start without run() has no stop pending
            # Python's own handling again: should asyncio.run's cleanup wait on a body that swallowed
            # its cancellation, the next Ctrl-C raises KeyboardInterrupt (run() ends quietly on it).
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int = signal.SIGINT) -> None:
        """Ctrl-C or SIGTERM under :meth:`run`: the first stops after the running steps, the next now."""
        if self._stop_requested is None:
            return  # run() has returned; the signal handlers go with its event loop
        runtime = self._runtime or self._stopping
        # Named as the user knows them: Ctrl-C sends SIGINT; SIGTERM comes from kill, systemd, docker ...
        name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
        if not self._stop_requested.is_set():
            self._stop_requested.set()
            self._first_signal = name
            if runtime is not None and runtime.busy:
                # Without this the user sees nothing happen until the step ends, and presses again.
                again = "press Ctrl-C again" if sig == signal.SIGINT else f"send {name} again"
                _notice(f"\nbaf: stopping after the current step (up to {STOP_GRACE_PERIOD:g} s); {again} to stop now")
        elif runtime is not None:
            busy = runtime.busy
            # Recorded with the step, so the log says which signal cut it short.
            first = self._first_signal  # None: run() was already stopping at a platform's request
            self._interrupt(
                f"a second {name}" if first == name else f"{name} after {first}" if first else f"{name} while stopping"
            )
            if busy:
                _notice("\nbaf: stopping now, without waiting for the current step")

    def request_stop(self) -> None:
        """Make :meth:`run` return (platforms call this when their user quits)."""
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def get_or_create_session(self, session_id: str, platform: Platform | None = None) -> Session:
        """The session ``session_id``, rebuilt from the log or started (its initial body queued)."""
        return await self._require_runtime().get_or_create(session_id, platform)

    async def receive_event(self, event: Event, platform: Platform | None = None) -> asyncio.Future[None]:
        """Queue ``event`` for its session; returns once the event is durably recorded.

        The returned future resolves when the event has been handled.
        """
        return await self._require_runtime().receive(event, platform)

    async def receive_message(self, session_id: str, text: str, platform: Platform | None = None) -> Session:
        """Deliver a text message and wait until it, and everything it caused, has been processed."""
        return await self._require_runtime().receive_message(session_id, text, platform)

    async def continue_session(self, session_id: str) -> Session:
        """Continue a fork: handle the messages it holds, and wait until they are handled.

        A fork cut after a message was recorded but before it was handled holds that message, and a fork
        cut before the session's first step holds the initial state's body: loading the fork never runs
        a model or a tool by itself. This records ``fork_continued`` and runs what was held, live.
        (Sending the fork a new message continues it too, what it held first.) A session that holds
        nothing is returned as it is.
        """
        done = await self._require_runtime().continue_session(session_id)
        await done
        return await self._require_runtime().get_or_create(session_id)

    async def wait_idle(self, session_id: str | None = None) -> None:
        """Wait until a session (or every session) has handled everything queued for it."""
        await self._require_runtime().wait_idle(session_id)

    def _require_runtime(self) -> Runtime:
        if self._runtime is None:
            raise ConfigurationError(f"agent {self.name!r} is not running; use 'async with agent:' or agent.start()")
        return self._runtime


def _refuse_while_loaded_by_baf() -> None:
    """Raise if baf's command line is importing the file that called :meth:`Agent.run` (see
    ``baf.core.agent_file``), naming the call's line."""
    loading = agent_file_being_loaded()
    if loading is None:
        return
    caller = sys._getframe(2)  # Agent.run's caller
    where = f"{loading.name} line {caller.f_lineno}" if Path(caller.f_code.co_filename) == loading else loading.name
    raise ConfigurationError(
        f"{where} calls agent.run() while baf loads the file, but `baf run` and `baf serve` run the agent "
        'themselves: put the call under `if __name__ == "__main__":` (then `python '
        f"{loading.name}` runs it too)"
    )


def _notice(text: str) -> None:
    """Tell the user on stderr, if it can still be written: a closed pipe must not keep a signal
    handler from doing its job."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: stderr was closed by the program
        print(text, file=sys.stderr, flush=True)


def _show_baf_log_lines() -> None:
    """Print the ``baf`` loggers' INFO lines and above on stderr, unless logging is configured already.

    Without a handler Python shows warnings only, so a server started with ``agent.run()`` would not
    say where it listens. An application that configures logging decides for itself.
    """
    baf_logger = logging.getLogger("baf")
    if logging.getLogger().handlers or baf_logger.handlers or baf_logger.level != logging.NOTSET:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))  # the format of Python's default (last resort) output
    baf_logger.addHandler(handler)
    baf_logger.setLevel(logging.INFO)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
