"""Benchmark: N concurrent WebSocket clients on loopback talking to an agent with a scripted model.

The server (an agent with a reasoning state on a FunctionLLM, an in-memory log and a WebSocketPlatform)
runs in a child process, so its memory can be measured on its own (RSS from /proc) and the clients do
not share its event loop. Reported:

- messages/s: replies received per second of wall time while every client sends ``--messages``
  messages one after another (send, wait for the reply, send the next);
- p50 / p99 latency from sending a message to receiving its reply;
- server memory per connected session: server RSS after every client has connected and had one
  exchange, minus RSS before any client connected, divided by N.

With ``--postgres`` the same clients are then run, in the same run, against ``baf serve`` workers over
PostgreSQL (issue 13): one worker, then two workers sharing the port (``SO_REUSEPORT``, the kernel spreads
the connections), each worker a ``python -m baf.serve.process worker`` over a fresh schema; memory is the
workers' RSS summed. The machine's load (``/proc/loadavg``) is printed before and after each
configuration: on a shared machine, compare figures of one run only. PostgreSQL:
``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster started with ``.ci/postgres``.

Loopback only, bounded in clients, messages and time (``--timeout``)::

    python bench/bench_websocket.py --clients 1000 --messages 5
    python bench/bench_websocket.py --clients 1000 --messages 5 --postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER_AGENT = HERE / "websocket_agent.py"
CLUSTER_SCRIPT = HERE.parent / ".ci" / "postgres"


def build_agent(port: int) -> tuple[Any, Any]:
    """The benchmark's agent (a reasoning state echoing the message, in-memory log) and its platform."""
    from baf import Agent
    from baf.library.state.reasoning_state_library import new_reasoning_state
    from baf.platforms.limits import ClientLimits
    from baf.platforms.websocket import WebSocketPlatform
    from baf.testing import FunctionLLM

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]], **_: Any) -> str:
        return f"echo: {messages[-1]['content']}"

    agent = Agent("bench", log="memory://")
    state = new_reasoning_state(agent, FunctionLLM(model), enable_task_planning=False, memory=0)
    state.when_event().go_to(state)
    # Every client comes from 127.0.0.1: the limits for one address (and on all connections) would refuse
    # most of them. Per-connection limits stay on; their cost is part of what is measured.
    per_address = ClientLimits(max_connections=None, max_connections_per_address=None,
                               new_sessions_per_address=None, messages_per_second_per_address=None)  # fmt: skip
    platform = WebSocketPlatform("127.0.0.1", port, ui=False, ping_interval=None, limits=per_address)
    agent.add_platform(platform)
    return agent, platform


def serve(port: int) -> None:
    """The server process: print the port, then serve until stdin closes."""

    async def main() -> None:
        agent, platform = build_agent(port)
        async with agent:
            print(platform.port, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # parent closes stdin to stop

    asyncio.run(main())


def scheduled(pids: list[int]) -> tuple[float, float]:
    """Seconds the processes ``pids`` (all their threads) spent on a CPU, and runnable but waiting for one
    (``/proc/PID/task/*/schedstat``). The second is what a shared machine costs them: on an idle machine it
    stays near zero. A process that has ended counts as nothing."""
    running = waiting = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as stat:
                    fields = stat.read().split()
            except OSError:
                continue
            running += int(fields[0])
            waiting += int(fields[1])
    return running / 1e9, waiting / 1e9


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def socket_count(pid: int) -> int:
    """Open sockets of ``pid``: its client connections, once those it had before they came are subtracted."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


# -- the clients: --client-processes child processes of this script, each driving its share -----------


async def exchange(ws: Any, text: str) -> float:
    """Send one message and wait for its reply; the seconds it took."""
    started = time.perf_counter()
    await ws.send(json.dumps({"type": "message", "text": text}))
    while True:
        frame = json.loads(await ws.recv())
        if frame["type"] == "reply":
            assert frame["text"] == f"echo: {text}", frame
            return time.perf_counter() - started
        if frame["type"] == "error":
            raise RuntimeError(frame)


async def run_client_part(first: int, count: int, messages: int, urls: list[str], moved: bool) -> None:
    """One client process: open ``count`` clients (numbered from ``first``) and warm each up with one
    exchange; say ``READY`` on stdout; on a line from stdin, have every client send its ``messages``; then
    print ``DONE`` with the latencies. Client ``i`` talks to ``urls[i % len(urls)]``; with ``moved`` it
    warms up there, then resumes its session on the next URL (another worker) for the measured messages."""
    from websockets.asyncio.client import ClientConnection, connect

    gate = asyncio.Semaphore(100)  # connect in waves: the listen backlog is finite

    async def hello(url: str, resume: str | None = None) -> tuple[ClientConnection, dict[str, Any]]:
        ws = await connect(url, open_timeout=60, ping_interval=None, compression=None)
        await ws.send(json.dumps({"type": "hello", "resume": resume} if resume else {"type": "hello"}))
        while (welcome := json.loads(await ws.recv()))["type"] != "welcome":
            pass
        return ws, welcome

    async def open_client(i: int) -> ClientConnection:
        async with gate:
            url = urls[i % len(urls)]
            ws, welcome = await hello(url)
            await exchange(ws, f"warm-up {i}")
            if not moved:
                return ws
            await ws.close()
            ws, _ = await hello(urls[(i + 1) % len(urls)], resume=welcome["resume_token"])
            while json.loads(await ws.recv())["type"] != "history":
                pass
            return ws

    sockets = await asyncio.gather(*(open_client(first + i) for i in range(count)))
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    latencies: list[float] = []

    async def talk(i: int, ws: ClientConnection) -> None:
        for m in range(messages):
            latencies.append(await exchange(ws, f"client {i} message {m}"))

    await asyncio.gather(*(talk(first + i, ws) for i, ws in enumerate(sockets)))
    print("DONE " + json.dumps(latencies), flush=True)
    await asyncio.gather(*(ws.close() for ws in sockets))


def postgres_pids(dsn: str | None) -> list[int]:
    """The PostgreSQL server's processes, when it runs on this machine and its folder can be read (the
    throwaway cluster's can); none otherwise."""
    if dsn is None:
        return []

    async def data_directory() -> str:
        import asyncpg

        connection = await asyncpg.connect(dsn)
        try:
            return str(await connection.fetchval("SHOW data_directory"))
        finally:
            await connection.close()

    try:
        with open(Path(asyncio.run(data_directory())) / "postmaster.pid", encoding="ascii") as pidfile:
            postmaster = int(pidfile.readline())
    except (OSError, ValueError):
        return []
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                        children.append(int(entry))
    return [postmaster, *children]


def run_clients(
    urls: list[str], server_pids: list[int], clients: int, messages: int, processes: int, *,
    moved: bool = False, dsn: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Connect ``clients`` clients from ``processes`` client processes, then time ``messages`` exchanges of
    each; figures for the servers ``server_pids`` (and the database's processes, with ``dsn``)."""
    rss_before = sum(rss_bytes(pid) for pid in server_pids)
    sockets_before = [socket_count(pid) for pid in server_pids]
    shares = [clients // processes + (1 if p < clients % processes else 0) for p in range(processes)]
    firsts = [sum(shares[:p]) for p in range(processes)]
    parts = [
        subprocess.Popen(
            [sys.executable, __file__, "--client-part", json.dumps([first, share, messages, urls, moved])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for first, share in zip(firsts, shares, strict=True)
        if share
    ]
    try:
        started = time.perf_counter()
        for part in parts:
            assert part.stdout is not None
            if part.stdout.readline().strip() != "READY":
                raise SystemExit("a client process failed to connect its clients")
        connect_seconds = time.perf_counter() - started
        time.sleep(0.5)  # let the servers settle before reading their memory
        rss_connected = sum(rss_bytes(pid) for pid in server_pids)
        connections = [socket_count(pid) - before for pid, before in zip(server_pids, sockets_before, strict=True)]
        database = postgres_pids(dsn)
        client_pids = [part.pid for part in parts]
        before = {name: scheduled(pids) for name, pids in (("server", server_pids), ("client", client_pids),
                                                           ("database", database))}  # fmt: skip
        started = time.perf_counter()
        for part in parts:
            assert part.stdin is not None
            part.stdin.write("go\n")
            part.stdin.flush()
        latencies: list[float] = []
        for part in parts:
            assert part.stdout is not None
            line = part.stdout.readline()
            if not line.startswith("DONE "):
                raise SystemExit("a client process failed while sending its messages")
            latencies += json.loads(line[5:])
        seconds = time.perf_counter() - started
        after = {name: scheduled(pids) for name, pids in (("server", server_pids), ("client", client_pids),
                                                          ("database", database))}  # fmt: skip
        per_server = [scheduled([pid]) for pid in server_pids]
    except BaseException:
        for part in parts:
            part.kill()
        raise
    finally:
        for part in parts:
            try:
                part.wait(30)
            except subprocess.TimeoutExpired:
                part.kill()
    latencies.sort()
    cpu = {name: round(after[name][0] - before[name][0], 2) for name in after}
    waited = {name: round(after[name][1] - before[name][1], 2) for name in after}
    return {
        "clients": clients,
        "messages_per_client": messages,
        "client_processes": len(parts),
        "replies": len(latencies),
        "seconds": round(seconds, 3),
        "messages_per_second": round(len(latencies) / seconds, 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "latency_p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 2),
        "connect_and_warm_up_seconds": round(connect_seconds, 3),
        "connections_per_server": connections,
        # While the messages are exchanged: seconds on a CPU, and runnable but waiting for one (the
        # machine's cores are shared by the clients, the servers, the database and whatever else runs).
        "server_cpu_seconds": cpu["server"],
        "server_cpu_seconds_each": [round(s[0], 2) for s in per_server],  # since each server started
        "server_waited_for_cpu_seconds": waited["server"],
        "client_cpu_seconds": cpu["client"],
        "client_waited_for_cpu_seconds": waited["client"],
        "database_cpu_seconds": cpu["database"] if database else None,
        "database_waited_for_cpu_seconds": waited["database"] if database else None,
        "server_cpu_us_per_message": round(cpu["server"] / len(latencies) * 1e6),
        "server_rss_before_mb": round(rss_before / 2**20, 1),
        "server_rss_connected_mb": round(rss_connected / 2**20, 1),
        "server_bytes_per_session": round((rss_connected - rss_before) / clients),
    }


def raise_fd_limit(needed: int) -> None:
    """Each client costs one fd here and one in the server: lift the soft limit towards the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            raise SystemExit(f"need {needed} file descriptors, the hard limit is {hard}; use fewer --clients")


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes), as ``uptime`` shows them."""
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def fresh_schema(server: str) -> str:
    """A new schema on ``server``; the DSN whose tables live there, with baf's tables made."""
    import asyncpg

    from baf.log.postgres import PostgresLog

    name = f"bench_ws_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(server)
    try:
        await connection.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await connection.close()
    dsn = f"{server}{'&' if '?' in server else '?'}search_path={name}"
    async with PostgresLog(dsn):  # the tables, before the workers race to make them
        pass
    return dsn


async def table_counts(dsn: str) -> dict[str, int]:
    """Rows ever inserted into baf's tables of ``dsn``'s schema, and transactions committed in its database
    (cumulative statistics: a backend reports them at the latest when it exits)."""
    import asyncpg

    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT relname, n_tup_ins FROM pg_stat_user_tables WHERE schemaname = current_schema()"
        )
        commits = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await connection.close()
    return {**{str(row[0]): int(row[1]) for row in rows}, "transactions": int(commits)}


def run_workers(
    server: str, workers: int, clients: int, messages: int, processes: int, *, moved: bool = False
) -> dict[str, Any]:
    """The clients against ``workers`` worker processes over PostgreSQL, sharing one port; with ``moved``,
    each worker on a port of its own and each client resumed on the worker that does not run its session."""
    dsn = asyncio.run(fresh_schema(server))
    ports = [free_port() for _ in range(workers)] if moved else [free_port()] * workers
    command = [sys.executable, "-m", "baf.serve.process", "worker", str(WORKER_AGENT), "--log", dsn,
               "--lease-ttl", "30", "--poll-interval", "2"]  # fmt: skip
    before = asyncio.run(table_counts(dsn))
    workers_started = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "BAF_BENCH_PORT": str(port)})
        for port in ports
    ]
    try:
        for process in workers_started:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("READY"):
                raise SystemExit(f"a worker did not start: {line!r}")
        urls = [f"ws://127.0.0.1:{port}/ws" for port in dict.fromkeys(ports)]
        result = run_clients(urls, [p.pid for p in workers_started], clients, messages, processes,
                             moved=moved, dsn=server)  # fmt: skip
    finally:
        stop_all(workers_started)
    time.sleep(0.5)  # the workers' database sessions report their statistics as they end
    after = asyncio.run(table_counts(dsn))
    counted = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    all_messages = clients * (messages + 1)  # the warm-up exchange included
    result["database"] = {
        "messages_in_all": all_messages,
        # A message forwarded to the worker that runs its session goes through the inbox.
        "forwarded_through_inbox": counted.get("baf_inbox", 0),
        "records_per_message": round(counted.get("baf_records", 0) / all_messages, 2),
        "lease_rows": counted.get("baf_leases", 0),
        # Single statements are transactions of their own: about the round trips, the schema set-up aside.
        "transactions_per_message": round(counted["transactions"] / all_messages, 3),
    }
    return result


def stop_all(processes: list[subprocess.Popen[str]]) -> None:
    """SIGTERM the workers (each stops cleanly) and wait for them."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        if process.stdout is not None:
            process.stdout.close()


def run_in_memory(clients: int, messages: int, processes: int) -> dict[str, Any]:
    """The clients against one process with an in-memory log (the figure this bench always reported)."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        return run_clients([f"ws://127.0.0.1:{port}/ws"], [server.pid], clients, messages, processes)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def measured(name: str, run: Any) -> dict[str, Any]:
    """``run()``'s figures, with the machine's load before and after."""
    before = load()
    result = run()
    result = {"configuration": name, **result, "load_before": before, "load_after": load()}
    print(json.dumps(result), file=sys.stderr, flush=True)  # progress, one line per configuration
    return result


def postgres_server() -> tuple[str, Path | None]:
    """``BAF_BENCH_POSTGRES_DSN``, or a throwaway cluster (its folder, to stop it afterwards)."""
    dsn = os.environ.get("BAF_BENCH_POSTGRES_DSN")
    if dsn:
        return dsn, None
    folder = Path(tempfile.mkdtemp(prefix="baf-bench-ws-pg-"))
    started = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start", str(folder / "pg")], capture_output=True, text=True)
    if started.returncode != 0:
        raise SystemExit(f"could not start PostgreSQL: {started.stderr[-2000:]}")
    return started.stdout.strip().splitlines()[-1], folder


def summary_table(results: list[dict[str, Any]]) -> str:
    """The figures that matter, one line per configuration, for the eye (the JSON above has them all)."""
    lines = ["configuration | msg/s | p50 ms | p99 ms | server CPU s (waited) | client CPU s (waited) | "
             "database CPU s (waited) | connections | forwarded"]  # fmt: skip
    for r in results:
        db = r.get("database", {})
        database = "-" if r["database_cpu_seconds"] is None else \
            f"{r['database_cpu_seconds']} ({r['database_waited_for_cpu_seconds']})"  # fmt: skip
        lines.append(
            f"{r['configuration']} | {r['messages_per_second']:.0f} | {r['latency_p50_ms']:.0f} | "
            f"{r['latency_p99_ms']:.0f} | {r['server_cpu_seconds']} ({r['server_waited_for_cpu_seconds']}) | "
            f"{r['client_cpu_seconds']} ({r['client_waited_for_cpu_seconds']}) | {database} | "
            f"{r['connections_per_server']} | {db.get('forwarded_through_inbox', '-')}"
        )
    return "\n".join(lines)


def give_up(_signum: int, _frame: object) -> None:
    raise TimeoutError("the run took longer than --timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000, help="concurrent clients (default 1000)")
    parser.add_argument("--messages", type=int, default=5, help="messages each client sends (default 5)")
    parser.add_argument("--client-processes", type=int, default=2, help="processes driving the clients (default 2)")
    parser.add_argument("--timeout", type=float, default=300, help="give up after this many seconds")
    parser.add_argument("--postgres", action="store_true", help="also run one and two baf serve workers on PostgreSQL")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--client-part", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    if args.client_part is not None:
        first, count, messages, urls, moved = json.loads(args.client_part)
        asyncio.run(run_client_part(first, count, messages, urls, moved))
        return
    if not 1 <= args.clients <= 10_000 or not 1 <= args.messages <= 1000 or not 1 <= args.client_processes <= 16:
        raise SystemExit("--clients must be 1..10000, --messages 1..1000 and --client-processes 1..16")
    raise_fd_limit(args.clients * 2 + 256)  # the children inherit the raised limit
    clients, messages, processes = args.clients, args.messages, args.client_processes
    # A run that hangs (a server that stopped answering) ends here rather than never; the processes it
    # started are stopped on the way out.
    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(math.ceil(args.timeout))
    if not args.postgres:
        result = run_in_memory(clients, messages, processes)
        result["python"] = sys.version.split()[0]
        result["cpus"] = os.cpu_count()
        print(json.dumps(result, indent=2))
        return
    server, cluster = postgres_server()
    try:
        results = [
            measured("one process, memory log", lambda: run_in_memory(clients, messages, processes)),
            measured("postgres x1 worker", lambda: run_workers(server, 1, clients, messages, processes)),
            measured("postgres x2 workers, one port", lambda: run_workers(server, 2, clients, messages, processes)),
            measured(
                "postgres x2 workers, each client moved to the other worker",
                lambda: run_workers(server, 2, clients, messages, processes, moved=True),
            ),
        ]
    finally:
        if cluster is not None:
            subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(cluster / "pg")], capture_output=True, check=False)
            shutil.rmtree(cluster, ignore_errors=True)
    one, two = results[1], results[2]
    summary = {
        "x2_over_x1_messages_per_second": round(two["messages_per_second"] / one["messages_per_second"], 2),
        "x2_over_x1_latency_p50": round(two["latency_p50_ms"] / one["latency_p50_ms"], 2),
        "x2_over_x1_latency_p99": round(two["latency_p99_ms"] / one["latency_p99_ms"], 2),
        "moved_over_one_port_messages_per_second": round(
            results[3]["messages_per_second"] / two["messages_per_second"], 2
        ),
    }
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results,
                      "summary": summary}, indent=2))  # fmt: skip
    print(summary_table(results))


if __name__ == "__main__":
    main()
