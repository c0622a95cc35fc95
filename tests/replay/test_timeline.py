"""The timeline model: grouping, filters and rebuilding full LLM requests."""

from __future__ import annotations

from pathlib import Path

from baf import Agent
from baf.library.state.pattern_state import new_pattern_state
from baf.log.record import Record
from baf.reasoning.patterns import ReAct
from baf.replay import EntryFilter, build_timeline, full_llm_request
from baf.replay.export import export_otel
from baf.replay.timeline import EntryKind, TimelineBuilder, flatten, iter_timeline
from baf.testing import ScriptedLLM

from .helpers import GOLDEN_SESSION, copy_golden, golden_maker, read_records_sync


def _step(seq: int, kind: str, **details: object) -> Record:
    data = {"kind": kind, "step": 0, "summary": kind, "details": details}
    return Record("s", seq, "reasoning_step", data, ts=float(seq))


async def test_full_llm_requests_match_what_the_model_received() -> None:
    maker = golden_maker()
    agent = maker.build_agent("memory://")
    async with agent:
        for text in maker.MESSAGES:
            await agent.receive_message(GOLDEN_SESSION, text)
        records = await agent.log.read(GOLDEN_SESSION)
    sent = [r for r in records if r.kind == "llm_request"]
    rebuilt = [full_llm_request(records, r.seq) for r in sent]
    model = _scripted(agent)
    assert len(rebuilt) == len(model.requests) == 6
    for request, received in zip(rebuilt, model.requests, strict=True):
        assert request is not None
        assert request["messages"] == received.messages
        assert request["system"] == received.system_message
        assert request["tools"] == received.tools
    assert full_llm_request(records, 1) is None  # not an llm_request


def _scripted(agent: object) -> object:
    """The ScriptedLLM inside the golden agent's reasoning body (held by the body's closure)."""
    from baf.testing.llms import ScriptedLLM

    state = agent.get_state("reasoning_state")  # type: ignore[attr-defined]
    for cell in state.body.__closure__ or ():
        config = cell.cell_contents
        if hasattr(config, "llm") and isinstance(config.llm, ScriptedLLM):
            return config.llm
    raise AssertionError("no ScriptedLLM found")


def test_a_reasoning_loop_cut_by_a_crash_is_an_open_group() -> None:
    records = [
        _step(1, "reasoning_started", request="q"),
        Record("s", 2, "llm_request", {"step": 0, "model": "m", "messages": []}, ts=2.0),
    ]
    entries = build_timeline(records)
    assert len(entries) == 1 and entries[0].status == "open"
    assert entries[0].children[0].kind == EntryKind.LLM_CALL and entries[0].children[0].status == "open"


def test_a_model_call_a_restart_cut_short_is_shown_apart_from_the_answer_asked_again() -> None:
    """The process stopped after recording a model request, before its answer; the restarted (or taking
    over) process resumed the step and asked again: the answer is shown where it was recorded, after the
    resume, with the request it answers; the request's own entry says it got no answer."""
    request = {"loop": "reasoning", "step": 0, "model": "m", "messages": []}
    records = [
        _step(1, "reasoning_started", request="q"),
        Record("s", 2, "llm_request", request, ts=2.0),
        Record("s", 3, "step_resumed", {"event_seq": 1}, ts=3.0),
        Record("s", 4, "llm_response", {"loop": "reasoning", "step": 0, "model": "m", "text": "five"}, ts=4.0),
        _step(5, "reasoning_finished", outcome="answered", steps=1),
    ]
    [group] = build_timeline(records)
    cut, resumed, answer = group.children
    assert (cut.kind, cut.seq, cut.status) == (EntryKind.LLM_CALL, 2, "error")
    assert cut.title.endswith("no answer recorded before the step was cut short; asked again when it resumed")
    assert (resumed.kind, resumed.seq) == (EntryKind.ENGINE, 3)
    assert (answer.kind, answer.seq, answer.ts, answer.status) == (EntryKind.LLM_CALL, 4, 4.0, "ok")
    assert answer.title == "m step 0 → 'five'" and answer.data["request"] == request
    # Without a resume between them, request and answer are one entry, as always.
    [plain] = build_timeline([records[0], records[1], records[3], records[4]])
    assert [(c.seq, c.status) for c in plain.children] == [(2, "ok")]


def test_a_new_invocation_closes_one_left_open() -> None:
    records = [_step(1, "reasoning_started", request="a"), _step(2, "reasoning_started", request="b"),
               _step(3, "reasoning_finished", outcome="answered", steps=1)]  # fmt: skip
    entries = build_timeline(records)
    assert [(e.title, e.status) for e in entries] == [("a", "open"), ("b", "ok")]


def test_unknown_kinds_and_interrupted_steps_are_shown() -> None:
    records = [Record("s", 1, "my_kind", {"x": 1}, ts=1.0),
               Record("s", 2, "step_started", {"event_seq": None}, ts=2.0),
               Record("s", 3, "step_finished", {"event_seq": 7, "interrupted": True}, ts=3.0)]  # fmt: skip
    entries = build_timeline(records)
    assert [(e.kind, e.seq) for e in entries] == [(EntryKind.RECORD, 1), (EntryKind.ENGINE, 3)]
    assert len(build_timeline(records, include_engine=True)) == 3


def test_an_interrupted_step_says_what_interrupted_it() -> None:
    def title(**data: object) -> str:
        record = Record("s", 1, "step_finished", {"event_seq": 7, "interrupted": True, **data}, ts=1.0)
        [entry] = build_timeline([record])
        assert entry.status == "error"
        return entry.title

    assert title().endswith("— interrupted by a crash")  # a log from before interrupted_by
    assert title(interrupted_by="crash").endswith("— interrupted by a crash")
    assert title(interrupted_by="user").endswith("— interrupted by the user")
    assert "grace period" in title(interrupted_by="stop")
    assert "fork" in title(interrupted_by="fork")
    assert title(interrupted_by="other").endswith("— interrupted (other)")


def test_builder_yields_entries_as_they_complete() -> None:
    builder = TimelineBuilder()
    assert builder.feed(_step(1, "reasoning_started", request="q")) == []
    assert builder.open_group is not None
    done = builder.feed(_step(2, "reasoning_finished", outcome="answered", steps=1))
    assert [e.kind for e in done] == [EntryKind.REASONING]
    assert builder.finish() == []


def test_filters(tmp_path: Path) -> None:
    records = read_records_sync(copy_golden(tmp_path))
    entries = list(iter_timeline(records))

    def shown(f: EntryFilter) -> list[tuple[str, int]]:
        out = []
        for entry in entries:
            kept = f.apply(entry)
            if kept is not None:
                out.append((kept.kind, kept.seq))
                out += [(c.kind, c.seq) for c in kept.children]
        return out

    tools_only = shown(EntryFilter(kinds=frozenset({"tool_result"})))
    assert {k for k, _ in tools_only} == {EntryKind.REASONING, EntryKind.TOOL_CALL}
    assert len([k for k, _ in tools_only if k == EntryKind.TOOL_CALL]) == 5
    grep = shown(EntryFilter(grep="TAX SERVICE"))
    assert (EntryKind.ERROR, next(r.seq for r in records if r.kind == "error")) in grep
    window = shown(EntryFilter(from_seq=55, to_seq=58))
    assert all(55 <= seq <= 58 for _, seq in window) and window
    assert shown(EntryFilter()) == shown(EntryFilter(from_seq=None))


async def record_react() -> tuple[list[Record], ScriptedLLM]:
    """A ReAct pattern session: multiply, then the final answer."""

    def multiply(a: int, b: int) -> int:
        """Multiply two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a * b

    llm = ScriptedLLM([
        ScriptedLLM.tool_call("multiply", {"a": 17, "b": 23}),
        ScriptedLLM.tool_call("final_answer", {"answer": "391"}),
    ])  # fmt: skip
    agent = Agent("calc", log="memory://")
    agent.new_tool(multiply)
    state = new_pattern_state(agent, llm, ReAct())
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("p", "What is 17 * 23?")
        records = await agent.log.read("p")
    return records, llm


async def test_full_llm_requests_of_a_pattern_are_what_the_model_received() -> None:
    records, llm = await record_react()
    rebuilt = [full_llm_request(records, r.seq) for r in records if r.kind == "llm_request"]
    assert len(rebuilt) == len(llm.requests) == 2
    for request, received in zip(rebuilt, llm.requests, strict=True):
        assert request is not None
        assert request["messages"] == received.messages  # complete, not the previous call's messages again
        assert request["system"] == received.system_message and request["tools"] == received.tools
    assert [request["step"] for request in rebuilt if request is not None] == [1, 2]


async def test_a_successful_pattern_run_is_shown_and_exported_as_a_success() -> None:
    records, _ = await record_react()
    groups = [e for e in build_timeline(records) if e.kind == EntryKind.REASONING]
    assert len(groups) == 1 and groups[0].status == "ok"  # outcome "completed", a pattern's success
    titles = [entry.title for _, entry in flatten(groups)]
    assert not any("None" in title for title in titles), titles
    assert "scripted react call 1 (thought) → calls multiply" in titles
    calls = [entry for _, entry in flatten(groups) if entry.kind == EntryKind.TOOL_CALL]
    assert [c.data["call"]["name"] for c in calls] == ["multiply", "final_answer"]
    assert all(c.status == "ok" and c.data["result"] is not None for c in calls)
    assert calls[1].data["result"]["content"] == "391"
    spans = export_otel(records)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert spans and all(span["status"]["code"] != 2 for span in spans)  # no ERROR span
