"""Delivery by following the log: a WebSocket client connected to a worker that does not run its session
gets every reply, reasoning step and task list of it, once, in order, from that worker; a lost
notification delays nothing past the poll; a reconnect gets the rest from the log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.platforms.websocket import history_items
from baf.serve import Worker

from .helpers import (
    eventually,
    resumed_on_another_worker,
    seqs_and_types,
    shown_records,
    turn_done,
    two_workers,
    two_ws_workers,
    ws_agent,
)
from .ws_client import LIVE, Client


@pytest.fixture
async def workers(postgres_dsn: str) -> AsyncIterator[tuple[tuple[Worker, int], tuple[Worker, int]]]:
    async with two_ws_workers(postgres_dsn) as pair:
        yield pair


async def test_a_client_on_the_other_worker_gets_every_record_once_in_order(workers: Any, postgres_dsn: str) -> None:
    (a, port_a), (b, port_b) = workers
    # The same user on worker a: resumed there (the token is good on every worker), shown its history ...
    tabs = await resumed_on_another_worker(port_b, port_a)
    session_id, other, history = tabs.session_id, tabs.other, tabs.history
    assert session_id not in a.runtime.sessions and session_id in b.runtime.sessions
    assert [item["type"] for item in history["items"]][:1] == ["user"]
    assert any(item.get("text") == "answer to q1" for item in history["items"])
    # ... and asking there: b runs the turn, a delivers it from the log
    await other.ask("q2")
    await turn_done(postgres_dsn, session_id, "q2")
    expected = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
    await other.until_seq(expected[-1]["seq"])
    assert {item["type"] for item in expected} >= {"reasoning_step", "task_list", "reply"}
    assert seqs_and_types(other.live()) == [(item["seq"], item["type"]) for item in expected]
    assert session_id not in a.runtime.sessions  # a never ran it ...
    info = await Leases(b.log).owner_of(session_id)
    assert info is not None and info.owner == "b" and info.epoch == 1  # ... nor took it over
    await tabs.owner.until("reply", text="answer to q2")  # the client on b got it from b itself
    await tabs.close()


async def test_a_message_sent_on_either_worker_shows_live_on_both_once_in_order(
    workers: Any, postgres_dsn: str
) -> None:
    """The same session in two tabs, each connected to another worker: what one tab sends appears live in
    the other (from the log, on the worker that does not run it), with the sender's id, in log order."""
    (a, port_a), (b, port_b) = workers
    tabs = await resumed_on_another_worker(port_b, port_a)
    on_b, on_a, session_id, history = tabs.owner, tabs.other, tabs.session_id, tabs.history
    await on_a.send(type="message", text="q2", id="sent-on-a")  # forwarded to b, which runs it
    await on_b.until("user", text="q2", id="sent-on-a")  # b's client sees it as b records it ...
    await turn_done(postgres_dsn, session_id, "q2")
    await on_b.send(type="message", text="q3", id="sent-on-b")  # ... and a's sees this one from the log
    await turn_done(postgres_dsn, session_id, "q3")
    # Delivery keeps log order: a record of q2 or q3 shown twice would come before q4's, which both wait for
    await on_b.send(type="message", text="q4", id="marker")
    await turn_done(postgres_dsn, session_id, "q4")
    async with PostgresLog(postgres_dsn, read_only=True) as log:
        expected = history_items(await log.read(session_id, history["last_seq"]))
    await on_a.until_seq(expected[-1]["seq"])
    await on_b.until_seq(expected[-1]["seq"])
    users = [(item["seq"], item["text"], item["id"]) for item in expected if item["type"] == "user"]
    assert [text for _, text, _ in users] == ["q2", "q3", "q4"]
    for client in (on_a, on_b):
        await client.ws.close()
        shown = [f for f in client.frames if f.get("type") in (*LIVE, "user") and f.get("seq", 0) > history["last_seq"]]
        assert seqs_and_types(shown) == [(item["seq"], item["type"]) for item in expected]
        assert [(f["seq"], f["text"], f["id"]) for f in shown if f["type"] == "user"] == users
    assert session_id not in a.runtime.sessions and session_id in b.runtime.sessions


async def test_a_lost_notification_delays_delivery_to_the_poll_and_loses_nothing(
    workers: Any, postgres_dsn: str
) -> None:
    (a, port_a), (_b, port_b) = workers
    tabs = await resumed_on_another_worker(port_b, port_a)
    other = tabs.other
    missed: list[str] = []
    a.follower.notified = missed.append  # type: ignore[method-assign]  # every notification is lost
    await other.ask("q2")  # the poll (1 s) finds the records
    await turn_done(postgres_dsn, tabs.session_id, "q2")
    expected = await shown_records(postgres_dsn, tabs.session_id, after=tabs.history["last_seq"])
    await other.until_seq(expected[-1]["seq"])
    assert missed  # notifications came, and were lost
    assert seqs_and_types(other.live()) == [(item["seq"], item["type"]) for item in expected]
    await tabs.close()


async def test_a_client_reconnecting_to_the_follower_gets_the_rest_from_the_log_then_live(
    workers: Any, postgres_dsn: str
) -> None:
    (_, port_a), (_b, port_b) = workers
    tabs = await resumed_on_another_worker(port_b, port_a)
    owner_client, other, session_id = tabs.owner, tabs.other, tabs.session_id
    await other.ask("q2")
    await turn_done(postgres_dsn, session_id, "q2")
    await other.until_seq((await shown_records(postgres_dsn, session_id))[-1]["seq"])
    seen = max(frame["seq"] for frame in other.live())
    await other.close()
    await owner_client.ask("q3")  # while the client is away
    await turn_done(postgres_dsn, session_id, "q3")
    back = await Client.open(port_a)
    await back.hello(tabs.token, after_seq=seen)
    history = await back.until("history")
    await back.ask("q4")
    await turn_done(postgres_dsn, session_id, "q4")
    expected = await shown_records(postgres_dsn, session_id, after=seen)
    await back.until_seq(expected[-1]["seq"])
    got = [(item["seq"], item["type"]) for item in history["items"] if item["type"] != "user"]
    got += seqs_and_types(back.live())
    assert got == [(item["seq"], item["type"]) for item in expected]  # each once, in order
    assert any(item.get("text") == "answer to q3" for item in history["items"])
    await owner_client.close()
    await back.close()


async def test_a_followed_session_taken_over_goes_on_here_without_a_gap_or_a_repeat(
    workers: Any, postgres_dsn: str
) -> None:
    (a, port_a), (b, port_b) = workers
    tabs = await resumed_on_another_worker(port_b, port_a)
    other, session_id = tabs.other, tabs.session_id
    await other.ask("q2")
    await turn_done(postgres_dsn, session_id, "q2")
    assert session_id in a.runtime.followed
    await tabs.owner.close()
    await b.stop()  # b gives its leases up: the next message makes a run the session
    await other.ask("q3")
    await turn_done(postgres_dsn, session_id, "q3")
    assert session_id in a.runtime.sessions and session_id not in a.runtime.followed
    expected = await shown_records(postgres_dsn, session_id, after=tabs.history["last_seq"])
    await other.until_seq(expected[-1]["seq"])
    assert seqs_and_types(other.live()) == [(item["seq"], item["type"]) for item in expected]
    await other.close()


async def test_a_session_whose_client_moved_to_the_other_worker_moves_there(workers: Any, postgres_dsn: str) -> None:
    (a, port_a), (b, port_b) = workers
    forwarded: list[str] = []
    forward = a.forward

    async def counting(session_id: str, data: dict[str, Any], platform: Any) -> None:
        forwarded.append(data["text"])
        await forward(session_id, data, platform)

    a.forward = counting  # type: ignore[method-assign]
    # the client leaves b (a page reload) and comes back on a
    tabs = await resumed_on_another_worker(port_b, port_a, owner_leaves=True)
    moved, session_id, history = tabs.other, tabs.session_id, tabs.history
    await moved.ask("q2")  # b runs it (the inbox), then gives the session up: its client is on a
    await turn_done(postgres_dsn, session_id, "q2")

    async def given_up() -> bool:
        info = await Leases(a.log).owner_of(session_id)
        return info is not None and not info.live

    await eventually(given_up, "b gave the session up")
    info = await Leases(a.log).owner_of(session_id)
    assert info is not None and info.owner == "b" and not info.live
    assert session_id not in b.runtime.sessions
    await moved.ask("q3")  # taken where it arrives: a runs the session from now on
    await turn_done(postgres_dsn, session_id, "q3")
    assert forwarded == ["q2"]
    assert session_id in a.runtime.sessions and session_id not in a.runtime.followed
    info = await Leases(a.log).owner_of(session_id)
    assert info is not None and info.owner == "a" and info.live
    expected = await shown_records(postgres_dsn, session_id, after=history["last_seq"])
    await moved.until_seq(expected[-1]["seq"])
    assert seqs_and_types(moved.live()) == [(item["seq"], item["type"]) for item in expected]  # once, in order
    await moved.close()


async def test_a_followed_session_no_client_watches_is_dropped(workers: Any) -> None:
    (a, port_a), (_, port_b) = workers
    tabs = await resumed_on_another_worker(port_b, port_a)
    assert tabs.session_id in a.runtime.followed
    await tabs.other.close()
    # after the grace (2 polls), at the next poll
    await eventually(lambda: tabs.session_id not in a.runtime.followed, "a stopped following the session")
    await tabs.owner.close()


async def test_a_session_dropped_from_memory_while_its_client_watches_is_followed_from_then_on(
    postgres_dsn: str,
) -> None:
    (agent_a, platform_a), (agent_b, platform_b) = ws_agent(), ws_agent()
    agent_b.session_idle_seconds = 0.3  # b drops its sessions from memory (and their leases) when idle
    async with two_workers(postgres_dsn, (agent_a, agent_b)) as (a, b):
        on_b = await Client.open(platform_b.port)
        welcome = await on_b.hello()
        session_id = welcome["session_id"]
        await on_b.ask("q1")
        await eventually(lambda: session_id not in b.runtime.sessions, "b dropped the idle session")
        assert session_id in b.runtime.followed

        async def released() -> bool:
            info = await Leases(a.log).owner_of(session_id)
            return info is not None and not info.live

        # The lease is given up just after the drop: a message reaching a before that is forwarded to b,
        # which would take the session back (its client is there) and run the turn itself.
        await eventually(released, "b gave the dropped session's lease up")
        seen = max(frame["seq"] for frame in on_b.live())
        on_a = await Client.open(platform_a.port)  # the same user in another tab, on a
        await on_a.hello(welcome["resume_token"])
        await on_a.until("history")
        await on_a.ask("q2")  # a takes the session (b gave its lease up) and runs it
        await turn_done(postgres_dsn, session_id, "q2")
        assert session_id in a.runtime.sessions
        expected = await shown_records(postgres_dsn, session_id, after=seen)
        await on_b.until_seq(expected[-1]["seq"])
        live_after = [frame for frame in on_b.live() if frame["seq"] > seen]
        assert seqs_and_types(live_after) == [(item["seq"], item["type"]) for item in expected]
        await on_a.close()
        await on_b.close()
