"""MCP tools: real MCP servers (tests/bridges/mcp_servers.py, written with the mcp SDK) run as
subprocesses over stdio, or on loopback over streamable HTTP, called by an agent with a scripted model."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from baf import Agent, ApprovalEvent
from baf.errors import ConfigurationError, ToolArgumentError, ToolListingError, ToolServerError
from baf.library.state.reasoning_state_library import new_reasoning_state
from baf.log.record import Record
from baf.replay.rerun import assert_replays
from baf.testing.llms import ScriptedLLM

pytestmark = pytest.mark.slow  # every test starts server processes

SERVERS = str(Path(__file__).with_name("mcp_servers.py"))


def server(kind: str) -> list[str]:
    return [sys.executable, SERVERS, kind]


def agent_with(llm: ScriptedLLM, log: str = "memory://", **options: Any) -> Agent:
    agent = Agent("mcp-test", log=log)
    state = new_reasoning_state(agent, llm, enable_task_planning=False, **options)
    state.when_event().go_to(state)
    return agent


async def tool_results(agent: Agent, session_id: str = "s") -> list[dict[str, Any]]:
    return [r.data for r in await agent.log.read(session_id) if r.kind == "tool_result"]


def requests(records: list[Record]) -> list[dict[str, Any]]:
    return [r.data for r in records if r.kind == "llm_request"]


def started(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it has exited.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


async def eventually(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


# -- the working path ---------------------------------------------------------------------------


async def test_stdio_tools_are_listed_namespaced_called_recorded_and_rerun_without_the_server(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("calc__add", {"a": 2, "b": 3}), "five",
        ScriptedLLM.tool_call("calc__fail", {"reason": "no luck"}), "it failed",
        ScriptedLLM.tool_call("calc__add", {"a": "two"}), "bad arguments",
    ])  # fmt: skip
    log = f"sqlite:///{tmp_path / 'log.db'}"
    agent = agent_with(llm, log)
    agent.add_mcp_server("calc", command=server("calc"), env={"BAF_TEST_STARTS": str(starts)})
    assert dict(agent.tools) == {}  # listed when a runtime starts, not before
    async with agent:
        assert {"calc__add", "calc__fail", "calc__die", "calc__hang", "calc__big", "calc__grow"} <= set(agent.tools)
        for text in ("add", "fail", "bad"):
            await asyncio.wait_for(agent.receive_message("s", text), 30)
        results = await tool_results(agent)
        records = await agent.log.read("s")
    assert not agent.tools  # gone with the runtime
    [pid] = started(starts)
    await eventually(lambda: not alive(pid))  # the stdio server was stopped with the runtime

    assert [(r["name"], r["content"], r["is_error"]) for r in results[:2]] == [
        ("calc__add", "5", False),
        ("calc__fail", "Error: Error executing tool fail", True),  # isError: a tool error for the model
    ]
    # Arguments are checked against the server's schema before anything is sent.
    assert results[2]["is_error"] and "'two' is not of type 'integer'" in results[2]["content"]
    offered = {t["function"]["name"]: t["function"] for t in requests(records)[0]["tools"]}
    assert offered["calc__add"]["description"] == "Add two whole numbers."
    assert offered["calc__add"]["parameters"] == {  # the server's own schema, as it is
        "type": "object", "title": "addArguments", "required": ["a", "b"],
        "properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}},
    }  # fmt: skip

    # A deterministic re-run serves every result from the log and never starts the server.
    report = await assert_replays(log, "s", agent)
    assert report.tool_results_served == 2  # the call with bad arguments was refused again, not served
    assert started(starts) == [pid]


async def test_a_server_added_with_requires_approval_waits_for_a_decision_before_each_call() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__add", {"a": 2, "b": 3}), "five"])
    agent = agent_with(llm)
    agent.add_mcp_server("calc", command=server("calc"), requires_approval=True)
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", "add"), 30)
        assert await tool_results(agent) == [] and llm.calls == 1  # waits: nothing was sent to the server
        done = await agent.receive_event(ApprovalEvent("s", call_id="call_1", approved=True, approver="ops"))
        await asyncio.wait_for(done, 30)
        results = await tool_results(agent)
    assert [(r["name"], r["content"]) for r in results] == [("calc__add", "5")]


async def test_http_server_gets_the_headers_and_answers_and_the_log_holds_credentials_redacted(tmp_path: Path) -> None:
    with http_server("calc") as url:
        llm = ScriptedLLM([ScriptedLLM.tool_call("web_whoami", {}), "done",
                           ScriptedLLM.tool_call("web_add", {"a": 40, "b": 2}), "done"])  # fmt: skip
        agent = agent_with(llm)
        agent.add_mcp_server("web", url=url, headers={"Authorization": "Bearer t0ken"}, prefix="web_",
                             tools=["whoami", "add"])  # fmt: skip
        async with agent:
            assert sorted(agent.tools) == ["web_add", "web_whoami"]  # tools=[...] picks
            await asyncio.wait_for(agent.receive_message("s", "who"), 30)
            await asyncio.wait_for(agent.receive_message("s", "add"), 30)
            results = await tool_results(agent)
    assert llm.requests[1].messages[-1]["content"] == "Bearer t0ken"  # the server got the header
    assert [r["content"] for r in results] == ["[REDACTED]", "42"]  # a credential header is a secret


def test_the_values_of_credential_headers_are_secrets_and_others_are_not() -> None:
    from baf.log.redaction import Redactor

    headers = {"X-API-Key": "k3y-value-1", "x-auth-token": "t0k3n-value", "Cookie": "sid=c00kie-1; theme=d4rk-th3me",
               "Proxy-Authorization": "Basic cHJveHk6cHc=", "X-Client-Secret": "s3cr3t-value",
               "X-Request-Id": "request-1234", "Accept": "application/json"}  # fmt: skip
    Agent("cfg", log="memory://").add_mcp_server("h", url="http://127.0.0.1:9/mcp", headers=headers)
    shown = Redactor().redact_text(" | ".join(f"{k}: {v}" for k, v in headers.items()) + " | c00kie-1 cHJveHk6cHc=")
    assert shown == ("X-API-Key: [REDACTED] | x-auth-token: [REDACTED] | Cookie: [REDACTED] | "
                     "Proxy-Authorization: [REDACTED] | X-Client-Secret: [REDACTED] | X-Request-Id: request-1234 | "
                     "Accept: application/json | [REDACTED] [REDACTED]")  # fmt: skip


@pytest.mark.parametrize(
    "kind",
    [
        "calc",  # the 2026 protocol: the change comes over the subscriptions/listen stream
        # Servers of the 2025 protocol have no subscriptions/listen: they send notifications/tools/list_changed,
        # and listing the tools again is a request made while that notification is being handled.
        "calc_legacy",
    ],
)
async def test_a_changed_tool_list_is_listed_again_and_offered(kind: str) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__grow", {}), "grown",
                       ScriptedLLM.tool_call("calc__extra", {}), "done"])  # fmt: skip
    agent = agent_with(llm)
    toolset = agent.add_mcp_server("calc", command=server(kind))
    async with agent:
        assert toolset.connection is not None and toolset.connection._client is not None
        assert (toolset.connection._client.protocol_version == "2025-11-25") == (kind == "calc_legacy")
        assert "calc__extra" not in agent.tools
        await asyncio.wait_for(agent.receive_message("s", "grow"), 30)
        await eventually(lambda: "calc__extra" in agent.tools)  # the server announced its new list
        await asyncio.wait_for(agent.receive_message("s", "use it"), 30)
        results = await tool_results(agent)
    assert [(r["name"], r["content"]) for r in results] == [("calc__grow", "grown"), ("calc__extra", "extra!")]
    assert "calc__extra" in [t["function"]["name"] for t in llm.requests[-2].tools]


async def test_two_quick_changes_end_with_the_newer_list_though_the_older_listing_answers_last(tmp_path: Path) -> None:
    # Two announced changes in quick succession; the listing asked for after the first is answered after
    # any listing asked for after the second. Listing once per announcement, the older answer arrived
    # last and won (v1 offered); listed in order, an overtaken listing is listed again.
    answered = tmp_path / "listings"
    llm = ScriptedLLM([ScriptedLLM.tool_call("race__change_twice", {}), "changed"])
    agent = agent_with(llm)
    agent.add_mcp_server("race", command=server("relist_race"), env={"BAF_TEST_LISTINGS": str(answered)})
    async with agent:
        assert "race__v0" in agent.tools
        await asyncio.wait_for(agent.receive_message("s", "change it"), 30)
        await eventually(lambda: "1" in answered.read_text().split())  # the older listing was answered
        await eventually(lambda: "race__v2" in agent.tools)
        await asyncio.sleep(0.3)  # time for an older answer to be handed on, were it to be
        assert sorted(agent.tools) == ["race__change_twice", "race__v2"]
    assert answered.read_text().split() == ["0", "1", "2"]  # one listing at a time: the overtaken one redone


async def test_stderr_goes_to_the_baf_logger(caplog: pytest.LogCaptureFixture) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__die", {}), "gone"])
    agent = agent_with(llm)
    agent.add_mcp_server("calc", command=server("calc"), max_restarts=0)
    with caplog.at_level(logging.INFO, logger="baf.mcp.calc"):
        async with agent:
            await asyncio.wait_for(agent.receive_message("s", "die"), 30)
            await eventually(lambda: any("dying on purpose" in r.getMessage() for r in caplog.records))
    assert all(r.name == "baf.mcp.calc" for r in caplog.records if "dying on purpose" in r.getMessage())


async def test_a_flood_of_stderr_without_a_newline_is_logged_cut_and_the_server_still_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__add", {"a": 1, "b": 2}), "three"])
    agent = agent_with(llm)
    agent.add_mcp_server("calc", command=server("flood"))
    with caplog.at_level(logging.INFO, logger="baf.mcp.calc"):
        async with agent:
            await eventually(lambda: any(r.getMessage() == "after the flood" for r in caplog.records))
            await asyncio.wait_for(agent.receive_message("s", "add"), 30)
            [result] = await tool_results(agent)
    assert result["content"] == "3"
    lines = [r.getMessage() for r in caplog.records if r.name == "baf.mcp.calc"]
    cut = lines.index("after the flood") - 1
    assert lines[cut] == "x" * 8192 + " [line cut: longer than 8192 bytes; the rest of it is dropped]"
    assert all(len(line) < 9000 for line in lines)  # 5 MB on one line: never held, never logged whole


# -- bad input ----------------------------------------------------------------------------------


async def test_a_server_that_does_not_start_stops_the_agent_start_with_its_reason() -> None:
    for command, expected in (
        (server("silent"), "cannot start: no configuration found"),  # exits at once, says why on stderr
        (["/nonexistent/mcp-server"], "could not be started"),
    ):
        agent = agent_with(ScriptedLLM([]))
        agent.add_mcp_server("broken", command=command)
        with pytest.raises(ConfigurationError, match="MCP server 'broken'") as caught:
            await agent.start()
        assert expected in str(caught.value)
        assert not agent.running

    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("mute", command=server("mute"), start_timeout=1.5)  # never answers the handshake
    with pytest.raises(ConfigurationError, match=r"did not answer within 1\.5 seconds"):
        await agent.start()


async def test_a_server_that_dies_mid_call_is_an_error_for_the_model_and_is_restarted_with_a_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    starts = tmp_path / "starts"
    llm = ScriptedLLM([
        ScriptedLLM.tool_call("calc__die", {}), ScriptedLLM.tool_call("calc__add", {"a": 1, "b": 1}), "two",
        ScriptedLLM.tool_call("calc__die", {}), ScriptedLLM.tool_call("calc__add", {"a": 1, "b": 1}), "gave up",
    ])  # fmt: skip
    agent = agent_with(llm, tool_timeout=20)
    agent.add_mcp_server("calc", command=server("calc"), env={"BAF_TEST_STARTS": str(starts)}, max_restarts=1)
    with caplog.at_level(logging.WARNING, logger="baf.mcp.calc"):
        async with agent:
            await asyncio.wait_for(agent.receive_message("s", "first"), 30)
            await asyncio.wait_for(agent.receive_message("s", "second"), 30)
            results = await tool_results(agent)
    died, added, died_again, refused = results
    assert died["is_error"] and "stopped during the call, which may or may not have taken effect" in died["content"]
    assert (added["content"], added["is_error"]) == ("2", False)  # the restarted server answers
    assert died_again["is_error"]
    assert refused["is_error"] and "is not running: it stopped 2 times" in refused["content"]
    assert len(started(starts)) == 2  # one restart, as bounded
    assert any("restarting it (1 of at most 1)" in r.getMessage() for r in caplog.records)


async def test_a_server_that_dies_between_calls_is_restarted_before_the_next_one(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__exit_soon", {}), "bye",
                       ScriptedLLM.tool_call("calc__add", {"a": 3, "b": 4}), "seven"])  # fmt: skip
    agent = agent_with(llm)
    agent.add_mcp_server("calc", command=server("calc"), env={"BAF_TEST_STARTS": str(starts)})
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", "exit"), 30)
        await eventually(lambda: len(started(starts)) == 2)  # its stderr closed: noticed, started again
        await asyncio.wait_for(agent.receive_message("s", "add"), 30)
        results = await tool_results(agent)
    assert [(r["content"], r["is_error"]) for r in results] == [("exiting", False), ("7", False)]


async def test_a_server_that_hangs_times_out_and_the_next_call_works() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__hang", {}), ScriptedLLM.tool_call("calc__add", {"a": 2, "b": 2}),
                       "four"])  # fmt: skip
    agent = agent_with(llm)
    agent.add_mcp_server("calc", command=server("calc"), timeout=0.5)
    async with agent:
        started_at = time.monotonic()
        await asyncio.wait_for(agent.receive_message("s", "hang"), 30)
        assert time.monotonic() - started_at < 15
        results = await tool_results(agent)
    assert results[0]["is_error"] and "did not finish within 0.5 seconds" in results[0]["content"]
    assert (results[1]["content"], results[1]["is_error"]) == ("4", False)


async def test_a_schema_that_is_not_an_object_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    # The SDK checks a listing as a whole: a tool whose schema is not an object schema spoils it.
    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("srv", command=server("not_object"))
    with pytest.raises(ConfigurationError) as caught:
        await agent.start()
    assert "its tool list does not follow the MCP schema (tools.1.inputSchema.type: Input should be 'object')" in (
        str(caught.value)
    )
    assert isinstance(caught.value.__cause__, ToolListingError)  # in baf's error tree
    assert isinstance(caught.value.__cause__, ToolServerError)

    # An object schema that is not a valid JSON Schema: that tool is refused, the others are offered.
    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("srv", command=server("bad_schema"))
    with caplog.at_level(logging.WARNING, logger="baf.mcp.srv"):
        async with agent:
            assert sorted(agent.tools) == ["srv__ok"]
    assert any("tool 'bad': its input schema is not a valid JSON Schema" in r.getMessage() for r in caplog.records)

    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("srv", command=server("bad_schema"), tools=["bad"])  # asked for by name: an error
    with pytest.raises(ConfigurationError, match="'bad': its input schema is not a valid JSON Schema"):
        await agent.start()


async def test_a_servers_schemas_cannot_stall_the_process_and_unusable_ones_are_refused_at_listing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The server's regular expressions are never run by baf (Python's re backtracks with the GIL held):
    # arguments the pattern would refuse go to the server, which checks its own input; a result that does
    # not fit the output schema's pattern is read as it is. Run, "a" * 60 + "b" would take years.
    slow = "a" * 60 + "b"
    llm = ScriptedLLM([ScriptedLLM.tool_call("h__redos", {"s": "a" * 20 + "b"}), "sent",
                       ScriptedLLM.tool_call("h__redos", {"s": slow}), "sent"])  # fmt: skip
    agent = agent_with(llm)
    agent.add_mcp_server("h", command=server("hostile"))
    with caplog.at_level(logging.WARNING, logger="baf.mcp.h"):
        async with agent:
            assert sorted(agent.tools) == ["h__ok", "h__redos"]
            await asyncio.wait_for(agent.receive_message("s", "short"), 30)
            [result] = await tool_results(agent)
            assert (result["content"], result["is_error"]) == ("redos ran", False)  # sent, and read as it is
            await asyncio.wait_for(agent.receive_message("s", "long"), 30)
            results = await tool_results(agent)
    assert [(r["content"], r["is_error"]) for r in results] == [("redos ran", False)] * 2

    warnings = "\n".join(r.getMessage() for r in caplog.records)
    for expected in (
        "MCP server 'h': tool 'missing_ref': its input schema refers to '#/nope', which it does not hold",
        "MCP server 'h': tool 'self_ref': its input schema refers to itself without going into a property",
        "MCP server 'h': tool 'remote_ref': its input schema refers to 'http://127.0.0.1:9/schema.json', which",
        "MCP server 'h': tool 'deep': its input schema nests more than 64 levels deep",
        "MCP server 'h': tool 'huge': its input schema holds more than 20000 values",
    ):
        assert expected in warnings

    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("h", command=server("hostile"), tools=["ok", "self_ref", "missing_ref"])
    with pytest.raises(ConfigurationError) as caught:  # asked for by name: the start stops, saying why
        await agent.start()
    assert str(caught.value).startswith("MCP server 'h': tools asked for cannot be offered:")
    assert "- 'self_ref': its input schema refers to itself" in str(caught.value)
    assert "- 'missing_ref': its input schema refers to '#/nope'" in str(caught.value)


def test_a_check_that_would_take_too_long_is_abandoned_and_left_to_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from baf.reasoning.mcp.schema import CHECK_BUDGET, schema_problem
    from baf.reasoning.mcp.tool import SchemaArguments

    # Each level refers twice to the next: checking a value walks 2**14 paths, so the work doubles with
    # each level of a schema a few hundred bytes long.
    levels = 14
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    schema = {"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}
    assert schema_problem(schema) is None  # a valid schema: only some values take long
    check = SchemaArguments("t", schema)
    assert check.validate('{"a": 1}') == {"a": 1}
    with caplog.at_level(logging.WARNING, logger="baf.mcp"):
        assert check.validate('{"a": "one"}') == {"a": "one"}  # would be refused, but not decided: sent on
    assert f"tool 't': checking the arguments against the schema would take more than {CHECK_BUDGET} steps" in (
        caplog.text
    )
    with pytest.raises(ToolArgumentError, match="'one' is not of type 'integer'"):  # a cheap check still works
        SchemaArguments("t", {"type": "object", "properties": {"a": {"type": "integer"}}}).validate('{"a": "one"}')


async def test_ten_megabytes_of_result_are_cut_for_the_model_and_recorded_cut() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("calc__big", {}), "big"])
    agent = agent_with(llm, max_tool_output=1000)
    agent.add_mcp_server("calc", command=server("calc"))
    async with agent:
        await asyncio.wait_for(agent.receive_message("s", "big"), 60)
        [result] = await tool_results(agent)
        request = llm.requests[-1]
    assert result["original_size"] == 10 * 1024 * 1024 and not result["is_error"]
    assert len(result["content"]) < 1100 and "[output truncated: 10485760 characters in all" in result["content"]
    assert request.messages[-1]["content"] == result["content"]


async def test_two_tools_with_one_name_are_both_refused(caplog: pytest.LogCaptureFixture) -> None:
    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("dup", command=server("duplicate"))
    with caplog.at_level(logging.WARNING, logger="baf.mcp.dup"):
        async with agent:
            assert sorted(agent.tools) == ["dup__single"]
    assert any("the server lists 2 tools named 'twin'" in r.getMessage() for r in caplog.records)

    agent = agent_with(ScriptedLLM([]))
    agent.add_mcp_server("dup", command=server("duplicate"), tools=["twin", "single", "absent"])
    with pytest.raises(ConfigurationError) as caught:
        await agent.start()
    assert "'twin': the server lists 2 tools" in str(caught.value)
    assert "'absent': the server does not list it" in str(caught.value)


# -- configuration ------------------------------------------------------------------------------


def test_configuration_errors_are_clear() -> None:
    agent = Agent("cfg", log="memory://")
    with pytest.raises(ConfigurationError, match="requires_approval must be True or False"):
        agent.add_mcp_server("a", command=["x"], requires_approval="yes")
    with pytest.raises(ConfigurationError, match="either command"):
        agent.add_mcp_server("a", command=["x"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigurationError, match="url must be"):
        agent.add_mcp_server("a", url="ftp://host/mcp")
    with pytest.raises(ConfigurationError, match=r"name 'a\.b'"):
        agent.add_mcp_server("a.b", command=["x"])
    with pytest.raises(ConfigurationError, match="non-empty list"):
        agent.add_mcp_server("a", command="python server.py")  # type: ignore[arg-type]

    @agent.tool
    def fs__read() -> str:
        """A tool of the agent's own in what would be the server's namespace."""
        return ""

    with pytest.raises(ConfigurationError, match="share its tool-name namespace"):
        agent.add_mcp_server("fs", command=["x"])
    agent.add_mcp_server("calc", command=["x"])
    with pytest.raises(ConfigurationError, match="in the namespace of toolset 'calc'"):
        agent.new_tool(lambda: "", name="calc__add")
    with pytest.raises(ConfigurationError, match="already has a toolset named 'calc'"):
        agent.add_mcp_server("calc", command=["y"], prefix="c2_")


def test_long_and_odd_tool_names_map_to_names_a_model_accepts() -> None:
    from baf.reasoning.mcp.names import model_name, select_tools

    assert model_name("fs__", "read.file/v2") == "fs__read_file_v2"
    long_a, long_b = model_name("fs__", "a" * 100), model_name("fs__", "a" * 99 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    selection = select_tools([("a.b", None, {"type": "object"}), ("a_b", None, {"type": "object"})], "p_", None)
    assert selection.tools == [] and len(selection.refused) == 2  # two names that would look alike


# -- helpers ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(kind: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([*server(kind), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, "the HTTP MCP server exited"
                assert time.monotonic() < deadline, "the HTTP MCP server did not listen in time"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def test_mcp_arguments_are_checked_against_the_servers_schema_with_every_problem_named() -> None:
    """An MCP tool has a JSON schema, not a signature: it is checked as JSON Schema, after the same JSON
    parsing as any tool, and every problem names the argument like any tool's."""
    from baf.errors import ToolArgumentError
    from baf.reasoning.mcp.names import ListedTool
    from baf.reasoning.mcp.tool import MCPTool

    schema = {
        "type": "object",
        "required": ["a", "items"],
        "properties": {"a": {"type": "integer"}, "items": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
    }

    async def never(name: str, args: dict[str, Any]) -> str:
        raise AssertionError("not called")

    tool = MCPTool(ListedTool("add", "calc__add", "Add.", schema), "calc", never)
    assert tool.validate_args('{"a": 1, "items": []}') == {"a": 1, "items": []}
    with pytest.raises(ToolArgumentError) as info:
        tool.validate_args('{"a": "two", "items": ["x", 3], "extra": 1}')
    message = str(info.value)
    assert message.startswith("Invalid arguments for tool 'calc__add' (3 problems):")
    assert "- argument 'a': 'two' is not of type 'integer'" in message
    assert "- argument 'items[1]': 3 is not of type 'string'" in message
    assert "('extra' was unexpected)" in message
    with pytest.raises(ToolArgumentError, match="the key 'a' appears more than once"):
        tool.validate_args('{"a": 1, "a": 2, "items": []}')
    with pytest.raises(ToolArgumentError, match="must be a JSON object, got array of 0 items"):
        tool.validate_args("[]")
    # Built through Tool's own constructor (its schema from elsewhere), as any tool: the schema as given.
    assert tool.schema == {"type": "function", "function": {"name": "calc__add", "description": "Add.",
                                                            "parameters": schema}}  # fmt: skip
    assert tool.takes_session is False and tool.idempotent is False and tool.timeout is None
