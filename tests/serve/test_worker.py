"""Two workers in one process over one PostgreSQL log: routing, exactly-once inbox, lease loss, lost
notifications, malformed messages. (Worker processes and kill -9: test_failover.py.)"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator

import asyncpg
import pytest

from baf.core.events import ReceiveTextEvent
from baf.core.forwarded import FORWARDED_KEY
from baf.errors import ConfigurationError, LogClosedError, LogError, LogStorageError
from baf.log.postgres import PostgresLog
from baf.log.postgres_leases import Leases
from baf.serve import Worker

from .helpers import (
    assert_each_question_answered_once,
    eventually,
    fresh_agent,
    load_agent,
    message,
    two_workers,
    wait_for_answers,
)


@pytest.fixture
async def workers(postgres_dsn: str) -> AsyncIterator[tuple[Worker, Worker]]:
    async with two_workers(postgres_dsn) as pair:
        yield pair


async def test_a_message_reaching_the_wrong_worker_is_handled_once_by_the_owner(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    first = await a.runtime.receive(ReceiveTextEvent("s", message="q1"))  # a claims s and handles it
    await first
    assert (await a.leases.owner_of("s")) is not None
    for text in ("q2", "q3"):  # the client moved to b: b forwards to a through the inbox
        await b.runtime.receive(ReceiveTextEvent("s", message=text))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1", "q2", "q3"]})
    assert_each_question_answered_once(records, {"s": ["q1", "q2", "q3"]})
    assert "s" not in b.runtime.sessions  # b never loaded it
    assert await b.inbox.pending("s") == []


async def test_many_sessions_spread_over_two_workers_each_answered_once(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    expected = {f"s{i}": [f"s{i}-q{j}" for j in range(3)] for i in range(12)}
    for j in range(3):
        for i, (session_id, questions) in enumerate(expected.items()):
            entry = a if (i + j) % 2 else b  # each client alternates between workers
            await entry.runtime.receive(ReceiveTextEvent(session_id, message=questions[j]))
    records = await wait_for_answers(postgres_dsn, expected)
    assert_each_question_answered_once(records, expected)
    owners = {(await a.leases.owner_of(s)).owner for s in expected}  # type: ignore[union-attr]
    assert owners == {"a", "b"}  # both took part


async def test_a_worker_that_lost_its_lease_drops_the_session_and_the_new_owner_goes_on(
    workers: tuple[Worker, Worker], postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = workers
    await (await a.runtime.receive(ReceiveTextEvent("s", message="q1")))
    connection = await asyncpg.connect(postgres_dsn)
    try:  # a is "paused" past its lease, and b takes the session over
        await connection.execute("UPDATE baf_leases SET expires_at = now() - interval '1 second'")
    finally:
        await connection.close()
    assert await b.claim("s")
    await b.runtime.receive(ReceiveTextEvent("s", message="q2"))
    lost = await a.leases.heartbeat()
    assert lost == ["s"]
    a.runtime.drop("s")
    # The worker's heartbeat says it lost the session (a warning): the drop adds no error line of its own.
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []
    with pytest.raises(LogError):  # whatever a still had would be fenced off
        await a.log.append([])  # nothing to write is fine...
        await a.log.append_consuming([], "s", [1])  # ...but a write for s is refused
    await a.runtime.receive(ReceiveTextEvent("s", message="q3"))  # a client still on a: forwarded to b
    records = await wait_for_answers(postgres_dsn, {"s": ["q1", "q2", "q3"]})
    assert_each_question_answered_once(records, {"s": ["q1", "q2", "q3"]})


async def test_a_heartbeat_deletes_the_rows_of_workers_silent_for_an_hour_and_keeps_their_leases(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    connection = await asyncpg.connect(postgres_dsn)
    try:
        for worker_id, silent in (("died-long-ago", "2 hours"), ("died-lately", "1 minute")):
            await connection.execute(
                "INSERT INTO baf_workers (worker_id, started_at, heartbeat_at) "
                f"VALUES ($1, now() - interval '{silent}', now() - interval '{silent}')",
                worker_id,
            )
        await connection.execute(
            "INSERT INTO baf_leases (session_id, owner, epoch, expires_at) "
            "VALUES ('left', 'died-long-ago', 7, now() - interval '2 hours')"
        )
        assert await a.leases.heartbeat() == []
        rows = {row[0] for row in await connection.fetch("SELECT worker_id FROM baf_workers")}
        assert rows == {a.worker_id, b.worker_id, "died-lately"}
        lease = await connection.fetchrow("SELECT owner, epoch FROM baf_leases WHERE session_id = 'left'")
        assert tuple(lease) == ("died-long-ago", 7)  # epochs only grow: the lease row stays
        # Taken now, the left session's epoch goes on from the old one.
        assert await b.leases.acquire("left") == 8
    finally:
        await connection.close()


async def test_a_worker_stopped_inside_a_transaction_does_not_keep_its_sessions_past_its_lease(
    postgres_dsn: str,
) -> None:
    """A worker stopped (SIGSTOP) between two statements of a transaction that holds its lease rows' locks:
    the server ends the transaction once it has been idle for the lease's length, so another worker takes the
    session over, instead of finding its row locked for as long as the worker stays stopped."""
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="w", lease_ttl=4, poll_interval=1)
    await worker.start()
    try:
        async with worker.log.connection() as pooled:  # every connection of a worker's store
            assert await pooled.fetchval("SHOW idle_in_transaction_session_timeout") == "4s"
    finally:
        await worker.stop()
    # The stopped worker: its store set up as a worker's, its heartbeats stopped with it.
    async with PostgresLog(postgres_dsn, worker_id="stopped", idle_in_transaction=1) as log:
        stopped = Leases(log, ttl=2)
        await stopped.register()
        assert await stopped.acquire("s") is not None
        held = await log.open_connection()
        try:
            transaction = held.transaction()
            await transaction.start()
            await held.execute("SELECT 1 FROM baf_leases WHERE session_id = 's' FOR UPDATE")  # then it stops
            async with two_workers(postgres_dsn) as (a, _b):
                await eventually(lambda: a.leases.acquire("s"), "the session taken over", within=15)
                assert (await a.leases.owner_of("s")).owner == "a"  # type: ignore[union-attr]
        finally:
            held.terminate()


async def test_a_lost_notification_is_covered_by_the_poll(workers: tuple[Worker, Worker], postgres_dsn: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:  # written as a platform on a third worker would, minus the NOTIFY
        import orjson

        await connection.execute(
            "INSERT INTO baf_inbox (session_id, payload) VALUES ('quiet', $1)",
            orjson.dumps(message("quiet", "q1")).decode(),
        )
    finally:
        await connection.close()
    records = await wait_for_answers(postgres_dsn, {"quiet": ["q1"]})  # by the poll (poll_interval is 1 s)
    assert_each_question_answered_once(records, {"quiet": ["q1"]})


async def test_a_malformed_inbox_message_is_an_error_record_and_the_session_goes_on(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, _ = workers
    assert await a.claim("s")
    connection = await asyncpg.connect(postgres_dsn)
    try:
        await connection.execute("INSERT INTO baf_inbox (session_id, payload) VALUES ('s', 'not json')")
    finally:
        await connection.close()
    await a.inbox.post("s", message("s", "q1"))
    records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
    errors = [r.data["message"] for r in records["s"] if r.kind == "error"]
    assert len(errors) == 1 and "malformed message" in errors[0] and "not JSON" in errors[0]
    assert_each_question_answered_once(records, {"s": ["q1"]})
    assert await a.inbox.pending("s") == []


async def test_two_workers_racing_for_one_session_one_wins_the_other_routes(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    await asyncio.gather(
        a.runtime.receive(ReceiveTextEvent("race", message="from-a")),
        b.runtime.receive(ReceiveTextEvent("race", message="from-b")),
    )
    records = await wait_for_answers(postgres_dsn, {"race": ["x", "y"]})
    received = sorted(r.data["text"] for r in records["race"] if r.kind == "message_received")
    assert received == ["from-a", "from-b"]  # both handled, each once, by the one owner
    info = await Leases(a.log).owner_of("race")
    assert info is not None
    loser = b if info.owner == "a" else a
    assert "race" not in loser.runtime.sessions


async def test_a_session_dropped_from_memory_gives_its_lease_up(postgres_dsn: str) -> None:
    agent = fresh_agent()
    agent.session_idle_seconds = 0.2
    async with Worker(agent, postgres_dsn, worker_id="idle", lease_ttl=30, poll_interval=1) as worker:
        await (await worker.runtime.receive(ReceiveTextEvent("s", message="q1")))
        info = await worker.leases.owner_of("s")
        assert info is not None and info.live and info.owner == "idle"

        async def released() -> bool:
            info = await worker.leases.owner_of("s")
            return info is not None and not info.live

        # dropped after 0.2 s idle; the lease is released right after: any worker may take the next message
        await eventually(released, "the idle session's lease was given up")
        assert "s" not in worker.runtime.sessions
        assert "s" not in worker.log.fenced()


async def test_a_stop_right_after_sessions_were_dropped_gives_their_leases_up_before_the_log_closes(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="stopping", lease_ttl=30, poll_interval=1)
    await worker.start()
    try:
        for session_id in ("s1", "s2"):
            await (await worker.runtime.receive(ReceiveTextEvent(session_id, message="q1")))
        # A heartbeat under way holds the leases up, so the releases of the sessions dropped now are still
        # pending when the stop begins (as for sessions whose steps end just as SIGTERM comes).
        await worker.leases._renewing.acquire()
        worker.runtime.let_go("s1")
        worker.runtime.let_go("s2")
        assert "s1" not in worker.runtime.sessions and "s1" not in worker.log.fenced()
        stopping = asyncio.create_task(worker.stop())
        await eventually(lambda: worker.runtime.stopping, "the runtime began to stop")
    finally:
        if worker.leases._renewing.locked():
            worker.leases._renewing.release()
    await stopping
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text  # nothing alarming
    connection = await asyncpg.connect(postgres_dsn)
    try:
        live = await connection.fetch("SELECT session_id FROM baf_leases WHERE expires_at >= now()")
        registered = await connection.fetch("SELECT worker_id FROM baf_workers")
    finally:
        await connection.close()
    assert live == [] and registered == []  # other workers may take the sessions at once


async def test_a_burst_of_worker_notifications_is_one_or_two_reads_of_the_live_workers(postgres_dsn: str) -> None:
    async with Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=30, poll_interval=1) as worker:
        reads = 0
        read = worker.leases.live_workers

        async def counted() -> list[str]:
            nonlocal reads
            reads += 1
            return await read()

        worker.leases.live_workers = counted  # type: ignore[method-assign]
        connection = await asyncpg.connect(postgres_dsn)
        try:  # 200 workers coming or going at once (as a restart of a big deployment), and one new worker
            async with connection.transaction():
                await connection.execute("INSERT INTO baf_workers (worker_id) VALUES ('z')")
                await connection.execute(
                    "SELECT pg_notify($1, 'w' || i) FROM generate_series(1, 200) i", worker.log.channels.workers
                )
        finally:
            await connection.close()
        await eventually(lambda: worker._peers == ["a", "z"], "the worker listed the new worker")
        refreshing = worker._refreshing
        assert refreshing is not None
        await refreshing
        # One read for the burst, another if part of it came while that read was under way (and one more if
        # a heartbeat fell meanwhile): never one per notification.
        assert 1 <= reads <= 5, reads


async def test_a_worker_told_of_a_change_while_it_reads_the_live_workers_reads_them_again(postgres_dsn: str) -> None:
    async with Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=30, poll_interval=1) as worker:
        reads = 0
        answer_late = asyncio.Event()
        read = worker.leases.live_workers

        async def first_answer_late() -> list[str]:
            nonlocal reads
            reads += 1
            peers = await read()
            if reads == 1:
                await answer_late.wait()
            return peers

        worker.leases.live_workers = first_answer_late  # type: ignore[method-assign]
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute("SELECT pg_notify($1, 'x')", worker.log.channels.workers)  # a worker leaving, say
            await eventually(lambda: reads == 1, "the worker began to read the live workers")
            # y registers after that read: its answer, when it comes, does not list y
            await connection.execute("INSERT INTO baf_workers (worker_id) VALUES ('y')")
            await connection.execute("SELECT pg_notify($1, 'y')", worker.log.channels.workers)
            await eventually(lambda: worker._peers_stale_since_read, "the worker heard y register")
        finally:
            await connection.close()
        answer_late.set()
        refreshing = worker._refreshing
        assert refreshing is not None
        await refreshing
        assert worker._peers == ["a", "y"]  # read again after the late answer, not left without y
        assert reads == 2


async def test_a_worker_that_cannot_list_the_live_workers_at_start_fails_and_leaves_nothing_open(
    postgres_dsn: str,
) -> None:
    name = "baf-test-peers-unlisted"  # the application name of this test's worker's connections
    dsn = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}application_name={name}"
    worker = Worker(fresh_agent(), dsn, worker_id="a", lease_ttl=10, poll_interval=1)

    async def cut() -> list[str]:  # the database lost as the list is read, right after the registration
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    worker.leases.live_workers = cut  # type: ignore[method-assign]
    with pytest.raises(LogStorageError, match="worker a: cannot list the live workers at start"):
        await worker.start()
    assert worker._tasks == [] and worker._stop_listening is None  # no loop, no listener
    with pytest.raises(LogClosedError):
        await worker.log.sessions()
    connection = await asyncpg.connect(postgres_dsn)
    try:
        # Its registration is undone: the other workers do not count it (nor hash sessions to it).
        assert await connection.fetch("SELECT worker_id FROM baf_workers") == []
        opened = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
        await eventually(lambda: _none(connection, opened, name), "the worker's connections were closed")
    finally:
        await connection.close()


async def test_a_worker_that_cannot_listen_at_start_fails_and_releases_the_log(postgres_dsn: str) -> None:
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)

    async def refused(*_args: object, **_kwargs: object) -> object:  # the server refuses one more connection
        raise LogStorageError("postgresql://...", "cannot open a database connection: too many clients already")

    worker.inbox.listen = refused  # type: ignore[method-assign]
    with pytest.raises(LogStorageError, match="too many clients"):
        await worker.start()
    with pytest.raises(LogClosedError):
        await worker.log.sessions()
    async with PostgresLog(postgres_dsn) as plain:  # its writer lock went with its store: a plain process opens
        assert await plain.sessions() == []


async def test_a_worker_whose_platform_cannot_listen_fails_and_leaves_nothing_open(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:  # another program has the platform's port (without SO_REUSEPORT)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("BAF_SERVE_PORT", str(taken.getsockname()[1]))
        worker = Worker(load_agent("serve_ws_agent.py"), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
        with pytest.raises(ConfigurationError, match="cannot listen on"):
            await worker.start()
    assert worker._tasks == [] and worker._stop_listening is None  # no loop, no listener
    with pytest.raises(LogClosedError):
        await worker.log.sessions()
    connection = await asyncpg.connect(postgres_dsn)
    try:  # not counted as live by the other workers
        assert await connection.fetch("SELECT worker_id FROM baf_workers") == []
    finally:
        await connection.close()
    async with PostgresLog(postgres_dsn) as plain:  # its writer lock went with its store: a plain process opens
        assert await plain.sessions() == []
    await asyncio.sleep(0)
    assert "cannot list the live workers" not in caplog.text


async def _none(connection: asyncpg.Connection, query: str, *args: object) -> bool:
    return await connection.fetchval(query, *args) == 0


LISTENING_TEST = "baf-test-worker-listening"  # the application name of the test's worker's connections


async def listening_backends(connection: asyncpg.Connection) -> list[int]:
    """The server pids of the connections listening to baf's channels (the test's worker's alone: others
    may share the server): their last statement is the ``SELECT 1`` a listener ends with."""
    rows = await connection.fetch(
        "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT 1' AND pid <> pg_backend_pid() "
        "AND datname = current_database() AND application_name = $1",
        LISTENING_TEST,
    )
    return [row[0] for row in rows]


async def test_a_worker_whose_listening_connection_is_cut_listens_again_and_takes_what_came_meanwhile(
    postgres_dsn: str,
) -> None:
    # No poll during the test (it would find the mail too, later): only notifications wake the worker.
    named = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}application_name={LISTENING_TEST}"
    async with Worker(fresh_agent(), named, worker_id="a", lease_ttl=10, poll_interval=3600) as worker:
        connection = await asyncpg.connect(postgres_dsn)
        try:
            (listener,) = await listening_backends(connection)
            # The server cuts the listening connection (as a restart does), and a message comes meanwhile.
            await connection.execute("SELECT pg_terminate_backend($1)", listener)
            await worker.inbox.post("s", message("s", "q1"))
            records = await wait_for_answers(postgres_dsn, {"s": ["q1"]})
            assert_each_question_answered_once(records, {"s": ["q1"]})

            async def listening_again() -> bool:
                return len(await listening_backends(connection)) == 1

            await eventually(listening_again, "the worker listened again")
        finally:
            await connection.close()
        await worker.inbox.post("t", message("t", "q1"))  # notified as before
        records = await wait_for_answers(postgres_dsn, {"t": ["q1"]})
        assert_each_question_answered_once(records, {"t": ["q1"]})


async def test_free_sessions_with_mail_go_to_the_worker_the_hash_chooses(postgres_dsn: str) -> None:
    # No poll during the test: it takes, after a moment, what the chosen worker has not taken yet, and a
    # chosen worker slowed down by a loaded machine would then lose some of its sessions to the other.
    a = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=3600)
    b = Worker(fresh_agent(), postgres_dsn, worker_id="b", lease_ttl=10, poll_interval=3600)
    async with a, b:
        await _spread_by_the_hash(a, b, postgres_dsn)


async def _spread_by_the_hash(a: Worker, b: Worker, postgres_dsn: str) -> None:
    # Each lists the other: b listed a at its start; a hears b register by a notification, then lists the
    # live workers again (a moment later: its own task).
    await eventually(lambda: a._peers == b._peers == ["a", "b"], "each worker listed the other")
    expected = {f"s{i}": [f"s{i}-q0"] for i in range(16)}
    for session_id, questions in expected.items():  # forwarded by a platform elsewhere: both are notified
        await a.inbox.post(session_id, message(session_id, questions[0]))
    records = await wait_for_answers(postgres_dsn, expected)
    assert_each_question_answered_once(records, expected)
    owners = {s: (await a.leases.owner_of(s)).owner for s in expected}  # type: ignore[union-attr]
    assert owners == {s: "a" if a._hash_picks(s) else "b" for s in expected}
    assert set(owners.values()) == {"a", "b"}  # spread, not all to whichever heard first


async def test_a_free_session_its_chosen_worker_does_not_take_is_taken_by_the_poll(
    workers: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = workers
    connection = await asyncpg.connect(postgres_dsn)
    try:  # a third worker registers (its heartbeat is fresh), then hangs: it takes nothing
        await connection.execute("INSERT INTO baf_workers (worker_id) VALUES ('hung')")
        await connection.execute("SELECT pg_notify($1, 'hung')", a.log.channels.workers)
    finally:
        await connection.close()
    await eventually(lambda: a._peers == b._peers == ["a", "b", "hung"], "both workers listed the hung one")
    hung_ones = [s for s in (f"h{i}" for i in range(40)) if not a._hash_picks(s) and not b._hash_picks(s)][:3]
    assert hung_ones
    for session_id in hung_ones:
        await a.inbox.post(session_id, message(session_id, "q"))
    expected = {session_id: ["q"] for session_id in hung_ones}
    records = await wait_for_answers(postgres_dsn, expected)  # by the poll (poll_interval is 1 s)
    assert_each_question_answered_once(records, expected)


@pytest.fixture
async def slow_polling(postgres_dsn: str) -> AsyncIterator[tuple[Worker, Worker]]:
    """Two workers whose poll comes only after the tests below end: what they take, a notification made them."""
    async with two_workers(postgres_dsn, poll_interval=60) as (a, b):
        await eventually(lambda: sorted(a._peers) == sorted(b._peers) == ["a", "b"], "each worker lists both")
        yield a, b


def picked_by(worker: Worker) -> str:
    """A session id the rendezvous hash gives to ``worker`` (among the two)."""
    return next(f"s{i}" for i in range(100) if worker._hash_picks(f"s{i}"))


async def test_mail_no_client_waits_for_keeps_the_session_on_its_worker_and_the_next_is_taken_at_once(
    slow_polling: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, _ = slow_polling
    session_id = picked_by(a)
    await a.inbox.post(session_id, message(session_id, "q1"))  # posted as other code would: no client waits
    await wait_for_answers(postgres_dsn, {session_id: ["q1"]}, within=20)
    info = await a.leases.owner_of(session_id)
    assert info is not None and info.owner == "a" and info.live  # kept: a runs it
    await a.inbox.post(session_id, message(session_id, "q2"))
    records = await wait_for_answers(postgres_dsn, {session_id: ["q1", "q2"]}, within=20)  # not the 60 s poll
    assert_each_question_answered_once(records, {session_id: ["q1", "q2"]})


async def test_mail_for_a_session_given_up_for_a_client_gone_since_is_taken_back_without_the_poll(
    slow_polling: tuple[Worker, Worker], postgres_dsn: str
) -> None:
    a, b = slow_polling
    session_id = picked_by(a)
    # As b forwards a message for a client of it connected to b: a runs it, then gives the session up.
    await a.inbox.post(session_id, {**message(session_id, "q1"), FORWARDED_KEY: "mark"})
    await wait_for_answers(postgres_dsn, {session_id: ["q1"]}, within=20)

    async def given_up() -> bool:
        info = await a.leases.owner_of(session_id)
        return info is not None and not info.live

    await eventually(given_up, "a gave the session up", within=20)
    # The client left b before its next message, which comes through the inbox: no worker has a client of
    # it, the hash picks a, and a takes it back after a moment.
    await b.inbox.post(session_id, message(session_id, "q2"))
    records = await wait_for_answers(postgres_dsn, {session_id: ["q1", "q2"]}, within=20)
    assert_each_question_answered_once(records, {session_id: ["q1", "q2"]})
    info = await a.leases.owner_of(session_id)
    assert info is not None and info.owner == "a" and info.live
    assert session_id not in b.runtime.sessions


async def test_a_worker_heard_while_a_failed_start_closes_the_log_is_no_warning(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A start that fails once the worker listens (a platform that cannot listen, a Ctrl-C while the platforms
    # start) has the runtime close the log before the worker stops listening. A worker heard coming or going
    # then made a refresh of the live workers fail on the closed log, and `baf serve` printed "cannot list
    # the live workers: ... is closed" beside the real reason: nothing is wrong, the worker is stopping.
    worker = Worker(fresh_agent(), postgres_dsn, worker_id="a", lease_ttl=10, poll_interval=1)
    await worker.start()
    try:
        await worker.agent.stop()  # as Agent.start does when a platform's start fails: the log is closed
        before = worker._refreshing
        connection = await asyncpg.connect(postgres_dsn)
        try:  # another worker comes: heard on the workers channel, still listened to
            await connection.execute("SELECT pg_notify($1, 'b')", worker.log.channels.workers)
        finally:
            await connection.close()
        await eventually(
            lambda: worker._refreshing is not before and worker._refreshing is not None and worker._refreshing.done(),
            "a refresh of the live workers after the notification",
        )
    finally:
        await worker.stop()
    assert "cannot list the live workers" not in caplog.text
