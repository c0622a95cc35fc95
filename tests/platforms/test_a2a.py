"""A2A: the server platform (contract kit, card, streaming) and the client tool (two baf agents on
loopback, replayed; a peer that is down, slow, or answers with a malformed task)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from a2a.client import ClientConfig, create_client
from a2a.server.routes import create_agent_card_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baf import Agent
from baf.library.state.reasoning_state_library import reasoning_body
from baf.llm.base import LLMResponse, ToolCall
from baf.platforms import Platform
from baf.platforms.a2a import A2APlatform
from baf.replay.rerun import assert_replays
from baf.testing import FunctionLLM, ScriptedLLM
from baf.testing.platform_contract import ContractClient, Output, PlatformContract

_users = itertools.count(1)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "a2a_agents.py"


def _user_message(text: str | Part, context_id: str) -> SendMessageRequest:
    part = Part(text=text) if isinstance(text, str) else text
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, parts=[part])
    )


def _text(parts: Any) -> str:
    return "\n".join(part.text for part in parts if part.HasField("text"))


# -- the contract ---------------------------------------------------------------------------------


class A2AClient(ContractClient):
    """One A2A client with its own context: each send is a streamed task, read in the background."""

    def __init__(self, client: Any, http: httpx.AsyncClient) -> None:
        self.client = client
        self.http = http
        self.context_id = f"user-{next(_users)}"
        self.outputs: asyncio.Queue[Output] = asyncio.Queue()
        self.readers: list[asyncio.Task[None]] = []

    @classmethod
    async def open(cls, url: str) -> A2AClient:
        http = httpx.AsyncClient(timeout=10)
        return cls(await create_client(url, ClientConfig(streaming=True, httpx_client=http)), http)

    async def send(self, text: str | Part) -> None:
        # The next message leaves only once the server has answered this one's stream with its first event
        # (the message is then in the session's queue), so one user's messages arrive in the order sent.
        accepted = asyncio.Event()
        reader = asyncio.ensure_future(self._read(text, accepted))
        self.readers.append(reader)
        waiting = asyncio.ensure_future(accepted.wait())
        await asyncio.wait([waiting, reader], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()

    async def decide(self, call_id: str, approved: bool, reason: str = "") -> bool:
        """Send the decision as a data part, in a new task of the context (``docs/a2a.md``)."""
        part = Part()
        part.data.struct_value.update({"approval": {"call_id": call_id, "approved": approved, "reason": reason}})
        await self.send(part)
        return True

    async def _read(self, text: str | Part, accepted: asyncio.Event) -> None:
        async for response in self.client.send_message(_user_message(text, self.context_id)):
            accepted.set()
            if response.HasField("artifact_update"):
                self.outputs.put_nowait(Output("reply", _text(response.artifact_update.artifact.parts), response))
            elif response.HasField("status_update"):
                status = response.status_update.status
                if status.state == TaskState.TASK_STATE_FAILED:
                    self.outputs.put_nowait(Output("error", _text(status.message.parts), response))
                else:
                    self.outputs.put_nowait(Output("other", "", response))

    async def next_output(self, wait: float) -> Output:
        async with asyncio.timeout(wait):
            return await self.outputs.get()

    async def close(self) -> None:
        for reader in self.readers:
            reader.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        await self.http.aclose()


class TestA2APlatform(PlatformContract):
    def make_platform(self) -> Platform:
        return A2APlatform("127.0.0.1", 0)

    async def open_client(self, agent: Agent, platform: Platform) -> ContractClient:
        assert isinstance(platform, A2APlatform)
        return await A2AClient.open(platform.url)


# -- two baf agents ---------------------------------------------------------------------------------


def _helper_agent(log: str) -> Agent:
    """Agent B: answers through a scripted model, with one planning step so steps stream."""
    agent = Agent("helper", log=log)
    agent.new_skill("arithmetic", "Add numbers carefully.", "Adds numbers")

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return LLMResponse(f"helper says: {question.upper()}", [])

    state = agent.new_state("answer", initial=True)
    state.set_body(reasoning_body(FunctionLLM(model), enable_task_planning=False))
    state.when_event().go_to(state)
    return agent


def _asking_agent(log: str, helper_url: str, timeout: float = 10.0, **options: Any) -> Agent:
    """Agent A: its model calls the helper, then repeats what it said (``options`` for ``add_a2a_agent``)."""
    agent = Agent("asker", log=log)
    agent.add_a2a_agent(helper_url, name="helper", timeout=timeout, **options)

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> LLMResponse:
        last = messages[-1]
        if last["role"] == "tool":
            return LLMResponse(f"The helper answered: {last['content']}", [])
        question = last["content"]
        return LLMResponse(None, [ToolCall(f"call-{len(messages)}", "helper", json.dumps({"message": question}))])

    state = agent.new_state("ask", initial=True)
    state.set_body(reasoning_body(FunctionLLM(model), enable_task_planning=False))
    state.when_event().go_to(state)
    return agent


async def test_two_baf_agents_talk_over_a2a_and_both_logs_replay(tmp_path: Path) -> None:
    log_a, log_b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    helper = _helper_agent(log_b)
    platform = helper.use_a2a_platform("127.0.0.1", 0, description="Shouts your question back")
    async with helper:
        asker = _asking_agent(log_a, platform.url)
        async with asker:
            session = await asker.receive_message("user-1", "what is two plus two", None)
            session = await asker.receive_message("user-1", "and three", None)
            replies = [r.data["text"] for r in await asker.log.read("user-1") if r.kind == "reply"]
        helper_sessions = await helper.log.sessions()
    assert replies == [
        "The helper answered: helper says: WHAT IS TWO PLUS TWO",
        "The helper answered: helper says: AND THREE",
    ]
    # One calling session is one A2A context, so one helper session.
    assert len(helper_sessions) == 1 and helper_sessions[0].startswith("a2a-")
    assert session.id == "user-1"

    # Both logs re-run with their code; the helper is down now, so A's tool result can only come from
    # its log.
    await assert_replays(log_a, "user-1", _asking_agent("memory://", platform.url))
    await assert_replays(log_b, helper_sessions[0], _helper_agent("memory://"))


async def test_the_card_and_the_stream_show_the_agent_and_its_reasoning_steps() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, description="Shouts your question back")
    async with helper, httpx.AsyncClient(timeout=10) as http:
        card = (await http.get(platform.url + ".well-known/agent-card.json")).json()
        assert card["name"] == "helper" and card["description"] == "Shouts your question back"
        assert [s["id"] for s in card["skills"]] == ["arithmetic"]
        assert card["supportedInterfaces"][0]["url"] == platform.url
        assert card["capabilities"]["streaming"] is True
        client = await create_client(platform.url, ClientConfig(streaming=True, httpx_client=http))
        kinds, steps, replies = [], [], []
        async for response in client.send_message(_user_message("hi", "ctx-1")):
            if response.HasField("status_update"):
                status = response.status_update.status
                kinds.append(TaskState.Name(status.state))
                for part in status.message.parts:
                    if part.HasField("data"):
                        steps.append(part.data.struct_value["reasoning_step"]["kind"])
            elif response.HasField("artifact_update"):
                replies.append(_text(response.artifact_update.artifact.parts))
        assert kinds[0] == "TASK_STATE_WORKING" and kinds[-1] == "TASK_STATE_COMPLETED"
        assert steps[0] == "reasoning_started" and steps[-1] == "reasoning_finished" and "llm_text" in steps
        assert replies == ["helper says: HI"]
        # A context id that could not be a session id is refused, not mangled.
        async for response in client.send_message(_user_message("hi", "bad id/with spaces")):
            if response.HasField("status_update"):
                final = response.status_update.status
        assert TaskState.Name(final.state) == "TASK_STATE_REJECTED"
        assert "context id" in _text(final.message.parts)
        assert await helper.log.sessions() == ["a2a-ctx-1"]


async def test_an_a2a_0_3_client_is_served_too() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0)
    message = {"kind": "message", "messageId": "m1", "role": "user", "contextId": "c03",
               "parts": [{"kind": "text", "text": "old client"}]}  # fmt: skip
    async with helper, httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            platform.url, json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        )
        task = response.json()["result"]
        assert task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "helper says: OLD CLIENT"}]
        assert await helper.log.sessions() == ["a2a-c03"]


async def test_a_port_in_use_is_a_clear_configuration_error() -> None:
    from baf.errors import ConfigurationError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        agent = Agent("x", log="memory://")
        agent.new_state("s", initial=True)
        agent.use_a2a_platform("127.0.0.1", taken.getsockname()[1])
        with pytest.raises(ConfigurationError, match=r"cannot listen on 127\.0\.0\.1"):
            await agent.start()


# -- bad peers --------------------------------------------------------------------------------------


class FakePeer:
    """An A2A server on loopback with a real agent card and a JSON-RPC endpoint that misbehaves."""

    def __init__(self, answer: Any, sends_to: str | None = None) -> None:
        self.answer = answer
        self.calls = 0
        self.sends_to = sends_to  # where its card says to send messages (default: itself)
        self.authorizations: list[str | None] = []
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> FakePeer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        card = AgentCard(
            name="peer", description="misbehaves", version="1",
            supported_interfaces=[AgentInterface(url=self.sends_to or self.url, protocol_binding="JSONRPC",
                                                 protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=False), default_input_modes=["text/plain"],
            default_output_modes=["text/plain"], skills=[AgentSkill(id="x", name="x", description="x", tags=["x"])],
        )  # fmt: skip
        app = Starlette(routes=[*create_agent_card_routes(card), Route("/", self._rpc, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        while not self._server.started:  # noqa: ASYNC110 - uvicorn has no event to wait on
            await asyncio.sleep(0.01)
        return self

    async def _rpc(self, request: Request) -> Response:
        self.calls += 1
        self.authorizations.append(request.headers.get("authorization"))
        body = await request.json()
        if callable(self.answer):
            return await self.answer(body)
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": self.answer})

    async def close(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)


@pytest.fixture
async def peers() -> AsyncIterator[list[FakePeer]]:
    started: list[FakePeer] = []
    yield started
    for peer in started:
        await peer.close()


async def _ask_through(url: str, tool_timeout: float = 10.0) -> tuple[list[str], list[dict[str, Any]]]:
    """Agent A asks the peer at ``url`` twice; returns its replies and the recorded tool results."""
    llm = ScriptedLLM(
        [
            LLMResponse(None, [ToolCall("c1", "helper", '{"message": "hello?"}')]),
            "The helper could not help.",
            LLMResponse(None, [ToolCall("c2", "helper", '{"message": "again?"}')]),
            "Still nothing.",
        ]
    )
    agent = Agent("asker", log="memory://")
    agent.add_a2a_agent(url, name="helper", timeout=tool_timeout)
    state = agent.new_state("ask", initial=True)
    state.set_body(reasoning_body(llm, enable_task_planning=False))
    state.when_event().go_to(state)
    async with agent:
        await agent.receive_message("s", "ask the helper", None)
        await agent.receive_message("s", "try again", None)
        records = await agent.log.read("s")
    return [r.data["text"] for r in records if r.kind == "reply"], [r.data for r in records if r.kind == "tool_result"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_peer_that_is_down_is_a_tool_error_and_the_session_goes_on() -> None:
    replies, results = await _ask_through(f"http://127.0.0.1:{_free_port()}/")
    assert replies == ["The helper could not help.", "Still nothing."]
    assert [r["is_error"] for r in results] == [True, True]
    assert "the A2A agent 'helper' at http://127.0.0.1:" in results[0]["content"]
    assert "could not be reached" in results[0]["content"]


async def test_a_slow_peer_times_out_and_the_session_goes_on(peers: list[FakePeer]) -> None:
    async def never(body: dict[str, Any]) -> Response:
        await asyncio.sleep(30)
        return JSONResponse({})

    peer = await FakePeer(never).start()
    peers.append(peer)
    # Long enough for each call to reach the peer on a loaded machine, so that both are seen to.
    replies, results = await _ask_through(peer.url, tool_timeout=2)
    assert replies == ["The helper could not help.", "Still nothing."]
    assert [r["is_error"] for r in results] == [True, True]
    assert "did not finish within 2 seconds" in results[0]["content"]
    assert peer.calls == 2


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"task": {"id": 12, "status": {"state": "BANANA"}}}, "malformed response"),
        ({"task": {"contextId": "c"}}, "malformed task (no id or no state)"),
        ({"neither": True}, "malformed response"),
        ("not an object", "malformed response"),
        ({"task": {"id": "t1", "contextId": "c", "status": {"state": "TASK_STATE_FAILED",
          "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "out of coffee"}]}}}},
         "failed the task: out of coffee"),
    ],
)  # fmt: skip
async def test_a_malformed_task_is_a_clear_tool_error(peers: list[FakePeer], answer: Any, expected: str) -> None:
    peer = await FakePeer(answer).start()
    peers.append(peer)
    replies, results = await _ask_through(peer.url)
    assert replies == ["The helper could not help.", "Still nothing."]
    assert [r["is_error"] for r in results] == [True, True]
    assert expected in results[0]["content"], results[0]["content"]


async def test_a_peer_that_answers_with_a_message_is_read_too(peers: list[FakePeer]) -> None:
    answer = {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "plain answer"},
              {"data": {"n": 4}}]}}  # fmt: skip
    peer = await FakePeer(answer).start()
    peers.append(peer)
    _, results = await _ask_through(peer.url)
    assert results[0]["is_error"] is False
    assert results[0]["content"] == 'plain answer\n{"n": 4.0}'


async def test_the_example_runs_offline_and_both_logs_re_run_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    path = EXAMPLE
    spec = importlib.util.spec_from_file_location("examples_a2a_agents", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    replies = await example.main(tmp_path)
    assert replies == [
        "The weather agent says Zurich: rain, 9 °C. So: pack an umbrella.",
        "The weather agent says Lisbon: sunny, 24 °C. So: pack for the weather.",
    ]
    out = capsys.readouterr().out
    assert "re-run of planner/trip: identical" in out and "re-run of weather/a2a-" in out
    assert out.count("identical") == 2


# -- who may call: Host, Origin, Content-Type, bearer token ------------------------------------------


def _rpc_send(text: str, context: str) -> dict[str, Any]:
    """A JSON-RPC ``message/send`` (A2A 0.3), as a page or a script would post it by hand."""
    message = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "contextId": context,
               "parts": [{"kind": "text", "text": text}]}  # fmt: skip
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}


def _refusal(response: httpx.Response) -> str:
    """The refusal's message: a JSON-RPC error object without an id."""
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600, body
    return str(body["error"]["message"])


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        # A page on any site posts text/plain without a CORS preflight; the SDK would read it as JSON.
        ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403, "origin not allowed"),
        ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "origin not allowed"),
        ({"Content-Type": "application/json", "Origin": "null"}, 403, "origin not allowed"),  # a sandboxed page
        ({"Content-Type": "text/plain"}, 415, "must be JSON"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "must be JSON"),
        ({}, 415, "must be JSON"),
    ],
)
async def test_a_cross_site_or_non_json_post_is_refused_and_nothing_is_recorded(
    headers: dict[str, str], status: int, reason: str
) -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0)
    async with helper, httpx.AsyncClient(timeout=10) as http:
        body = json.dumps(_rpc_send("run your tools for me", "csrf")).encode()
        response = await http.post(platform.url, content=body, headers=headers)
        assert response.status_code == status and reason in _refusal(response)
        assert await helper.log.sessions() == []
        # The same request from a client that is not a browser (no Origin), or from the server's own origin.
        for origin in ({}, {"Origin": f"http://127.0.0.1:{platform.port}"}):
            answer = await http.post(platform.url, content=body, headers={"Content-Type": "application/json", **origin})
            assert answer.json()["result"]["status"]["state"] == "completed"
        assert await helper.log.sessions() == ["a2a-csrf"]


async def test_a_foreign_host_is_refused_against_dns_rebinding() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0)
    async with helper, httpx.AsyncClient(timeout=10) as http:
        card_url = platform.url + ".well-known/agent-card.json"
        for host in (f"attacker.example:{platform.port}", "127.0.0.1:1", "localhost"):
            response = await http.post(platform.url, json=_rpc_send("read me a file", "rebind"), headers={"Host": host})
            assert response.status_code == 403 and "host not allowed" in _refusal(response), host
            assert (await http.get(card_url, headers={"Host": host})).status_code == 403
        # Two Origins (or Hosts, which the HTTP library refuses to send): which one would count? Neither.
        twice = [("Origin", f"http://127.0.0.1:{platform.port}"), ("Origin", "http://attacker.example")]
        response = await http.post(platform.url, json=_rpc_send("hi", "rebind"), headers=twice)
        assert response.status_code == 400 and "duplicate Origin header" in _refusal(response)
        assert await helper.log.sessions() == []
        # The names the server has by default, on its port: its card is read, its agent answers.
        for host in (f"localhost:{platform.port}", f"127.0.0.1:{platform.port}"):
            assert (await http.get(card_url, headers={"Host": host})).json()["name"] == "helper"
        response = await http.post(
            platform.url, json=_rpc_send("hi", "rebind"), headers={"Host": f"localhost:{platform.port}"}
        )
        assert response.json()["result"]["status"]["state"] == "completed"


async def test_listed_hosts_and_origins_and_the_public_url_host_are_served() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform(
        "127.0.0.1", 0, allowed_hosts=["agents.example", "other.example:8443"], allowed_origins=["https://app.example"]
    )
    proxied = _helper_agent("memory://")
    behind_proxy = proxied.use_a2a_platform("127.0.0.1", 0, public_url="https://agents.example/helper/")
    async with helper, proxied, httpx.AsyncClient(timeout=10) as http:
        for host, status in [("agents.example", 200), ("other.example:8443", 200), ("other.example", 403),
                             (f"127.0.0.1:{platform.port}", 403)]:  # fmt: skip
            response = await http.post(platform.url, json=_rpc_send("hi", "listed"), headers={"Host": host})
            assert response.status_code == status, host
        # A page on a listed origin: its preflight is answered, and its post gets the CORS headers it needs.
        page = {"Host": "agents.example", "Origin": "https://app.example"}
        preflight = await http.options(
            platform.url,
            headers={**page, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert preflight.headers["access-control-allow-headers"] == "content-type"
        response = await http.post(platform.url, json=_rpc_send("from the app", "listed"), headers=page)
        assert response.json()["result"]["status"]["state"] == "completed"
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        refused = await http.post(
            platform.url, json=_rpc_send("hi", "listed"), headers={**page, "Origin": "https://evil.example"}
        )
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
        # Behind a proxy that keeps the public Host, the public name is served by default.
        for host, status in [("agents.example", 200), ("agents.example:443", 200), ("evil.example", 403)]:
            response = await http.post(
                f"http://127.0.0.1:{behind_proxy.port}/", json=_rpc_send("hi", "proxied"), headers={"Host": host}
            )
            assert response.status_code == status, host
        assert await helper.log.sessions() == ["a2a-listed"]


async def test_a_bearer_token_guards_all_but_the_card_and_add_a2a_agent_sends_it() -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, auth_token="s3cret-token")
    async with helper, httpx.AsyncClient(timeout=10) as http:
        # The card stays public and says how to authenticate.
        card = (await http.get(platform.url + ".well-known/agent-card.json")).json()
        assert card["name"] == "helper"
        assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
            response = await http.post(platform.url, json=_rpc_send("hi", "auth"), headers=headers)
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", headers
            assert "bearer token" in _refusal(response)
        assert await helper.log.sessions() == []
        with_token = _asking_agent("memory://", platform.url, auth_token="s3cret-token")
        without = _asking_agent("memory://", platform.url)
        async with with_token, without:
            await with_token.receive_message("u", "two plus two", None)
            await without.receive_message("u", "two plus two", None)
            answered = [r.data["text"] for r in await with_token.log.read("u") if r.kind == "reply"]
            refused = [r.data for r in await without.log.read("u") if r.kind == "tool_result"]
        assert answered == ["The helper answered: helper says: TWO PLUS TWO"]
        assert refused[0]["is_error"] is True and "401" in refused[0]["content"], refused
        assert len(await helper.log.sessions()) == 1


async def test_the_bearer_token_given_to_add_a2a_agent_is_sent_and_never_written_to_the_log() -> None:
    token = "A2A-T0KEN-GIVEN-IN-PYTHON"  # upper case: the helper's shouted answer holds it as it is
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, auth_token=token)
    async with helper:
        asking = _asking_agent("memory://", platform.url, auth_token=token)
        async with asking:
            await asking.receive_message("u", f"is {token} right", None)
            records = await asking.log.read("u")
    texts = [json.dumps(r.data) for r in records]
    assert [r.data["text"] for r in records if r.kind == "reply"] == [
        "The helper answered: helper says: IS [REDACTED] RIGHT"  # answered: the token was accepted
    ]
    assert not any(token in text for text in texts) and any("[REDACTED]" in text for text in texts)


async def test_the_token_goes_only_to_the_peers_own_origin_not_where_its_card_points(
    peers: list[FakePeer],
) -> None:
    """A card served at 127.0.0.1:P that names another address (localhost:Q, another origin) to send
    messages to: whoever serves the card must not collect the token, so the message goes there without it."""
    elsewhere = await FakePeer({"kind": "message", "messageId": "m", "role": "agent", "parts": []}).start()
    peers.append(elsewhere)
    other_origin = elsewhere.url.replace("127.0.0.1", "localhost")
    card_server = await FakePeer({}, sends_to=other_origin).start()
    peers.append(card_server)
    asking = Agent("asker", log="memory://")
    tool = asking.add_a2a_agent(card_server.url, "peer", auth_token="TOP-SECRET")
    with contextlib.suppress(Exception):  # the answer does not matter: where the token went does
        await tool.fn("hi")
    assert elsewhere.calls == 1 and elsewhere.authorizations == [None]
    # Sent to the peer's own origin, the token goes with it.
    own = await FakePeer({"kind": "message", "messageId": "m", "role": "agent", "parts": []}).start()
    peers.append(own)
    with contextlib.suppress(Exception):
        await asking.add_a2a_agent(own.url, "own", auth_token="TOP-SECRET").fn("hi")
    assert own.authorizations == ["Bearer TOP-SECRET"]


@pytest.mark.parametrize("origin", ["http://[", "http://[::1"])
async def test_an_origin_no_url_parser_reads_is_refused_not_an_error(
    origin: str, caplog: pytest.LogCaptureFixture
) -> None:
    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0)
    async with helper, httpx.AsyncClient(timeout=10) as http:
        response = await http.post(platform.url, json=_rpc_send("hi", "bad-origin"), headers={"Origin": origin})
        assert response.status_code == 403 and "origin not allowed" in _refusal(response)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_token_function_decides_and_one_that_raises_refuses() -> None:
    def check(token: str) -> bool:
        if token == "boom":
            raise RuntimeError("token service down")
        return token == "good"

    helper = _helper_agent("memory://")
    platform = helper.use_a2a_platform("127.0.0.1", 0, auth_token=check)
    async with helper, httpx.AsyncClient(timeout=10) as http:
        for token, status in [("good", 200), ("bad", 401), ("boom", 401)]:
            response = await http.post(
                platform.url, json=_rpc_send("hi", "fn"), headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == status, token
