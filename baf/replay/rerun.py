"""Deterministic re-run: the agent's current code over a recorded session, everything else from the log.

:func:`rerun` feeds the session's recorded inbound events (and variable changes made outside any step)
to the agent, on a fresh in-memory log, one at a time. Bodies, transitions and the reasoning loop run for
real; every model response and every tool result comes from the recorded ``llm_response`` and
``tool_result`` records (a :class:`LogEffects` installed with
:func:`~baf.reasoning.effects.use_effect_source`), so nothing reaches a network or a tool. Tool
arguments are still validated by the tools as they are now, and planning tools still run (they only
touch the loop's task list). A model call or tool call the log cannot answer raises
:class:`~baf.reasoning.effects.ReplayGuardError` instead of going live.

The new records are then compared with the recorded ones, in order, inbound messages left out (they
are the input); time stamps, latencies, tracebacks, model names and the platform name are ignored. The
:class:`RerunReport` names the first difference: its recorded seq, what the log holds and what the code
did now (for an LLM request, both requests in full), or says the run is identical.

A step a restart resumed is one step: its ``step_resumed`` record marks where a restart took it over,
and is not something the code writes. A fork re-runs in segments (``_segments``): its origin up to the
cut, then from the log as the fork found it, with ``fork_continued`` fed as an input, since the user,
not the code, set the fork going.

Limits: events are fed after the previous one is handled, so a session whose messages arrived while an
earlier one was still running re-runs as if they arrived later; a body's own side effects (anything
but the model and tools) happen again; a step that was interrupted (a stop, Ctrl-C, a crash in a body
that cannot resume) diverges there, since the code now runs it to its end.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from baf.core.events import event_from_data
from baf.core.intent_routing import INTENT_PREDICTED
from baf.core.runtime import Runtime
from baf.errors import ConfigurationError, LogClosedError, SessionNotFoundError
from baf.llm.base import LLMResponse, ToolCall
from baf.log import MemoryLog, Record, RecordKind, SessionLog, open_log
from baf.log.projection import project
from baf.reasoning.effects import (
    FullRequest,
    RecordedToolResult,
    ReplayGuardError,
    rebuild_requests,
    use_effect_source,
)
from baf.reasoning.tool import Tool
from baf.wording import counted

if TYPE_CHECKING:
    from baf.core.agent import Agent

__all__ = ["Divergence", "LogEffects", "RerunReport", "assert_replays", "read_session", "rerun"]

#: Fields left out of the comparison, by record kind: they change from run to run by nature, or are
#: bookkeeping a version-1 record did not have (a loop run's number, a pattern's step, the cost).
#: ``llm_request`` records are compared as the full requests they stand for (one may hold only what
#: changed since the previous request, a version-1 pattern record the whole request).
IGNORED_FIELDS: dict[str, tuple[str, ...]] = {
    RecordKind.SESSION_STARTED: ("platform",),
    RecordKind.LLM_REQUEST: ("model",),
    RecordKind.LLM_RESPONSE: ("model", "provider", "latency_ms", "run", "step", "cost"),
    RecordKind.TOOL_RESULT: ("step",),
    RecordKind.ERROR: ("traceback",),
}

#: What a difference in a record of each kind means, for the report.
_WHAT = {
    RecordKind.TRANSITION: "a different transition",
    RecordKind.LLM_REQUEST: "a different LLM request",
    RecordKind.LLM_RESPONSE: "a different LLM response",
    RecordKind.TOOL_RESULT: "a different tool result",
    RecordKind.VARIABLE_SET: "a different variable",
    RecordKind.VARIABLE_DELETED: "a different variable",
    RecordKind.REPLY: "a different reply",
    RecordKind.ERROR: "a different error",
    RecordKind.REASONING_STEP: "a different reasoning step",
    RecordKind.TASK_LIST: "a different task list",
    INTENT_PREDICTED: "a different intent prediction",
}


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the re-run first differs from the log."""

    #: The seq of the recorded record that differs (the last recorded seq + 1 if the log ran out first).
    seq: int
    #: What differs, e.g. "a different transition", "a different LLM request", "a different reply".
    what: str
    #: What the log holds there (a record as a dict, a full request, or ``None``).
    recorded: Any
    #: What the code did now (same shapes).
    now: Any


@dataclass(frozen=True, slots=True)
class RerunReport:
    """The outcome of :func:`rerun`."""

    session_id: str
    divergence: Divergence | None
    records_compared: int
    llm_responses_served: int
    tool_results_served: int
    #: What the guards stopped (a model or tool call the log could not answer), if anything.
    guard_failures: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """True when the re-run wrote the same records as the log (ignoring :data:`IGNORED_FIELDS`)."""
        return self.divergence is None

    def __str__(self) -> str:
        served = (f"{counted(self.llm_responses_served, 'LLM response')} and "
                  f"{counted(self.tool_results_served, 'tool result')} served")  # fmt: skip
        if self.divergence is None:
            compared = counted(self.records_compared, "record")
            return f"session {self.session_id!r}: identical ({compared} compared; {served})"
        d = self.divergence
        lines = [
            f"session {self.session_id!r}: diverges at seq {d.seq}: {d.what} ({served})",
            f"  recorded: {_show(d.recorded)}",
            f"  now:      {_show(d.now)}",
        ]
        lines += [f"  guard: {failure}" for failure in self.guard_failures]
        return "\n".join(lines)


class LogEffects:
    """An :class:`~baf.reasoning.effects.EffectSource` answering from a recorded session.

    Model responses are served in the order they were recorded; tool results by the response they
    belong to and their call id; intent predictions (``intent_predicted``) in the order they were
    recorded, so no intent classifier is asked. Anything else raises :class:`ReplayGuardError`.
    """

    def __init__(self, records: Sequence[Record]) -> None:
        self.responses: list[LLMResponse] = []
        self.results: dict[tuple[int, str], RecordedToolResult] = {}
        self.predictions: list[dict[str, Any]] = []
        for record in records:
            if record.kind == INTENT_PREDICTED:
                self.predictions.append(dict(record.data))
            elif record.kind == RecordKind.LLM_RESPONSE:
                self.responses.append(LLMResponse.from_dict(record.data))
            elif record.kind == RecordKind.TOOL_RESULT:
                data = record.data
                content = str(data["content"])
                size = int(data["original_size"])  # version-1 pattern results get it from their upcaster
                result = RecordedToolResult(content, bool(data["is_error"]), size)
                self.results[(len(self.responses) - 1, str(data["call_id"]))] = result
        self.llm_served = 0
        self.tools_served = 0
        self.intents_served = 0
        self.failures: list[str] = []
        self._tool_schemas: dict[str, dict[str, Any]] = {}
        for record in records:
            if record.kind == RecordKind.LLM_REQUEST:
                for schema in record.data.get("tools") or []:
                    name = schema.get("function", {}).get("name") if isinstance(schema, dict) else None
                    if isinstance(name, str):
                        self._tool_schemas.setdefault(name, schema)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Every tool schema the recorded requests offered, one per name, in the order first offered:
        what tools that exist only while connected (MCP) are rebuilt from, since a re-run connects nothing."""
        return list(self._tool_schemas.values())

    def intent_prediction(self) -> dict[str, Any]:
        """The next recorded ``intent_predicted`` data (read by ``baf.core.intent_routing``)."""
        if self.intents_served >= len(self.predictions):
            return self._fail(f"the code classified a message's intent (#{self.intents_served + 1}); "
                              f"the log has only {len(self.predictions)} predictions")  # fmt: skip
        self.intents_served += 1
        return self.predictions[self.intents_served - 1]

    def llm_response(self, request: FullRequest) -> LLMResponse | None:
        """The next recorded response (the request is compared with the records, not here)."""
        if self.llm_served >= len(self.responses):
            return self._fail(f"the code asked the model a request #{self.llm_served + 1} (step {request.step}); "
                              f"the log has only {len(self.responses)} responses")  # fmt: skip
        self.llm_served += 1
        return self.responses[self.llm_served - 1]

    def tool_result(self, step: int, call: ToolCall, tool: Tool) -> RecordedToolResult | None:
        """The recorded result of ``call`` in the response last served."""
        result = self.results.get((self.llm_served - 1, call.id))
        if result is None:
            return self._fail(f"the code ran tool call {call.id!r} ({call.name}) at step {step}; the log has no result")
        self.tools_served += 1
        return result

    def _fail(self, message: str) -> Any:
        self.failures.append(message)
        raise ReplayGuardError(f"re-run guard: {message}")


async def read_session(log: str | SessionLog, session_id: str) -> list[Record]:
    """The records of ``session_id`` in ``log`` (a URL or a store, opened for the read if needed).

    A SQLite URL is opened read-only: checking a recorded session (a test fixture) must not change its file.
    """
    if isinstance(log, str):
        read_only = {"read_only": True} if log.lower().startswith(("sqlite:", "postgres")) else {}
        async with open_log(log, **read_only) as store:
            records = await store.read(session_id)
    else:
        try:
            records = await log.read(session_id)
        except LogClosedError:
            async with log:
                records = await log.read(session_id)
    if not records:
        raise SessionNotFoundError(session_id)
    return records


async def rerun(log: str | SessionLog, session_id: str, agent: Agent) -> RerunReport:
    """Re-run ``agent``'s current code over the recorded session and report the first divergence.

    ``agent`` must not be running; its own log and platforms are left alone (the re-run writes to a
    fresh in-memory log and delivers nothing).
    """
    recorded = await read_session(log, session_id)
    divergence, compared, llm_served, tools_served, failures = None, 0, 0, 0, []
    for segment in _segments(recorded):
        effects = LogEffects(segment.records)
        produced = await _run(agent, session_id, segment, effects)
        divergence, count = _compare(recorded, segment, produced)
        compared += count
        llm_served += effects.llm_served
        tools_served += effects.tools_served
        if divergence is not None or not segment.cut_inside_step:
            # Past a cut inside a step the re-run runs on where the fork stopped: what it could not be
            # served there is not a failure.
            failures += effects.failures
        if divergence is not None:
            break
    return RerunReport(session_id, divergence, compared, llm_served, tools_served, failures)


async def assert_replays(log: str | SessionLog, session_id: str, agent: Agent) -> RerunReport:
    """:func:`rerun`, raising ``AssertionError`` with the report unless the re-run is identical."""
    report = await rerun(log, session_id, agent)
    if not report.identical:
        raise AssertionError(str(report))
    return report


@dataclass(frozen=True, slots=True)
class _Segment:
    """One stretch of a session that the code re-runs in one go.

    A session is one segment, unless it is a fork: then each ``forked_from`` starts a new one, which
    re-runs from the log as the fork found it (``seed``), since the fork, not the code, made that cut.
    """

    #: The recorded records the re-run's log starts with (up to the fork's ``forked_from``).
    seed: list[Record]
    #: The recorded records the code must write again (a fork's origin part ends at its cut).
    records: list[Record]
    #: What to feed: inbound messages handled here, outside variable changes, fork continuations.
    inputs: list[Record]
    #: The fork cut inside a step: the re-run goes on past the cut, and only what came before is compared.
    cut_inside_step: bool = False
    #: The fork cut before the session's first step: the code ran nothing in this part (the fork holds
    #: the initial body, and runs it when continued, in the next part).
    cut_before_start: bool = False


def _segments(recorded: Sequence[Record]) -> list[_Segment]:
    forks = [i for i, r in enumerate(recorded) if r.kind == RecordKind.FORKED_FROM]
    segments, start = [], 0
    for index in forks:
        cut = recorded[index].data.get("seq")
        records = [r for r in recorded[start:index] if not isinstance(cut, int) or r.seq <= cut]
        # Messages still waiting at the cut are the fork's to handle (held, then continued), not this part's.
        waiting = project(recorded[0].session_id, recorded[: start + len(records)]).unstarted
        inputs = [r for r in _inputs(records) if r.seq not in waiting]
        inside = bool(recorded[index].data.get("inside_step"))
        before_start = recorded[index].data.get("start_held") is True
        segments.append(_Segment(list(recorded[:start]), records, inputs, inside, before_start))
        start = index + 1
    rest = list(recorded[start:])
    segments.append(_Segment(list(recorded[:start]), rest, _inputs(rest)))
    return segments


async def _run(agent: Agent, session_id: str, segment: _Segment, effects: LogEffects) -> list[Record]:
    """Feed a segment's inputs to a private runtime of ``agent`` over a log holding its seed; the
    records the runtime wrote."""
    if agent.running:
        raise ConfigurationError(f"agent {agent.name!r} is running; re-run it from a stopped agent")
    if segment.cut_before_start and not segment.inputs:
        # Only ``session_started`` stands before the cut, and no code ran: running the agent here would
        # start its initial body, which the fork holds.
        return list(segment.records)
    store = MemoryLog()
    if segment.seed:
        await store.start()
        await store.append(segment.seed)
    runtime = Runtime(agent, store)
    try:
        with use_effect_source(effects):
            await runtime.start()
            session = await runtime.get_or_create(session_id, None)
            await runtime.wait_idle(session_id)
            for record in segment.inputs:
                if record.kind == RecordKind.MESSAGE_RECEIVED:
                    await (await runtime.receive(event_from_data(session_id, record.data["event"]), None))
                elif record.kind == RecordKind.FORK_CONTINUED:
                    await (await runtime.continue_session(session_id))
                elif record.kind == RecordKind.VARIABLE_SET:
                    session.set(record.data["name"], record.data["value"])
                else:
                    session.delete(record.data["name"])
                await runtime.wait_idle(session_id)
            produced = await store.read(session_id)
    finally:
        await runtime.stop()
    return produced[len(segment.seed) :]


def _inputs(records: Sequence[Record]) -> list[Record]:
    """What came from outside: inbound messages, variables changed while no step was running, and the
    user continuing a fork."""
    inputs, in_step = [], False
    for record in records:
        if record.kind == RecordKind.STEP_STARTED:
            in_step = True
        elif record.kind == RecordKind.STEP_FINISHED:
            in_step = False
        elif record.kind in (RecordKind.MESSAGE_RECEIVED, RecordKind.FORK_CONTINUED) or (
            not in_step and record.kind in (RecordKind.VARIABLE_SET, RecordKind.VARIABLE_DELETED)
        ):
            inputs.append(record)
    return inputs


#: Recorded kinds the code does not write again: the input, a restart continuing a step, a fork's mark.
_NOT_WRITTEN = frozenset({RecordKind.MESSAGE_RECEIVED, RecordKind.STEP_RESUMED, RecordKind.FORKED_FROM})


def _compare(
    recorded: Sequence[Record], segment: _Segment, produced: Sequence[Record]
) -> tuple[Divergence | None, int]:
    """The first difference between the segment's recorded outputs and the re-run's (inputs left out).

    A crash-resumed step is compared as the one step it is: its ``step_resumed`` is where a restart took
    it over, not something the code does.
    """
    old = [r for r in segment.records if r.kind not in _NOT_WRITTEN]
    new = [r for r in produced if r.kind != RecordKind.MESSAGE_RECEIVED]
    if segment.cut_inside_step:
        new = new[: len(old)]
    everything_now = [*segment.seed, *produced]
    old_inputs, new_inputs = _message_numbers(recorded), _message_numbers(everything_now)
    old_requests, new_requests = _full_requests(recorded), _full_requests(everything_now)
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a.kind == b.kind == RecordKind.LLM_REQUEST:
            before, now = old_requests[a.seq], new_requests[b.seq]
            if before == now:
                continue
            return Divergence(a.seq, "a different LLM request", before, now), index + 1
        if a.kind == b.kind and _comparable(a, old_inputs) == _comparable(b, new_inputs):
            continue
        what = _WHAT.get(a.kind, f"a different {a.kind} record") if a.kind == b.kind else (
            f"a {b.kind} record where the log has a {a.kind} record"
        )  # fmt: skip
        return Divergence(a.seq, what, _shown(a), _shown(b)), index + 1
    if len(old) == len(new):
        return None, len(old)
    if len(old) > len(new):
        extra = old[len(new)]
        return Divergence(extra.seq, "the re-run stopped before this record", _shown(extra), None), len(new)
    last = segment.records[-1].seq if segment.records else (recorded[-1].seq if recorded else 0)
    return Divergence(last + 1, "the re-run wrote more records than the log has", None, _shown(new[len(old)])), len(old)


def _message_numbers(records: Sequence[Record]) -> dict[int, int]:
    """Inbound message seqs by their order: steps refer to their message by seq, which shifts when a
    message was recorded while an earlier step was still running."""
    seqs = [r.seq for r in records if r.kind == RecordKind.MESSAGE_RECEIVED]
    return {seq: number for number, seq in enumerate(seqs, 1)}


def _comparable(record: Record, messages: dict[int, int] | None = None) -> dict[str, Any]:
    ignored = IGNORED_FIELDS.get(record.kind, ())
    data = {key: value for key, value in record.data.items() if key not in ignored}
    if messages is not None and data.get("event_seq") in messages:
        data["event_seq"] = f"message #{messages[data['event_seq']]}"
    return data


def _shown(record: Record) -> dict[str, Any]:
    return {"kind": record.kind, **_comparable(record)}


def _full_requests(records: Sequence[Record]) -> dict[int, dict[str, Any]]:
    """Each ``llm_request`` record's full request, by seq."""
    return {r.seq: {"loop": r.loop, "turn": r.turn, **r.comparable()}
            for r in rebuild_requests(records) if r.seq is not None}  # fmt: skip


def _show(value: Any, limit: int = 2000) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text)} characters]"
