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
import json
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


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes ``pids`` used so far (from /proc)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def run_clients(port: int, server_pids: list[int], clients: int, messages: int) -> dict[str, Any]:
    from websockets.asyncio.client import ClientConnection, connect

    url = f"ws://127.0.0.1:{port}/ws"
    rss_before = sum(rss_bytes(pid) for pid in server_pids)
    gate = asyncio.Semaphore(100)  # connect in waves: the listen backlog is finite

    async def exchange(ws: ClientConnection, text: str) -> float:
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "text": text}))
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == "reply":
                assert frame["text"] == f"echo: {text}", frame
                return time.perf_counter() - started
            if frame["type"] == "error":
                raise RuntimeError(frame)

    async def open_client(i: int) -> ClientConnection:
        async with gate:
            ws = await connect(url, open_timeout=60, ping_interval=None, compression=None)
            await ws.send(json.dumps({"type": "hello"}))
            while json.loads(await ws.recv())["type"] != "welcome":
                pass
            await exchange(ws, f"warm-up {i}")
            return ws

    started = time.perf_counter()
    sockets = await asyncio.gather(*(open_client(i) for i in range(clients)))
    connect_seconds = time.perf_counter() - started
    await asyncio.sleep(0.5)  # let the server settle before reading its memory
    rss_connected = sum(rss_bytes(pid) for pid in server_pids)

    latencies: list[float] = []

    async def talk(i: int, ws: ClientConnection) -> None:
        for m in range(messages):
            latencies.append(await exchange(ws, f"client {i} message {m}"))

    started, client_cpu, server_cpu = time.perf_counter(), time.process_time(), cpu_seconds(server_pids)
    await asyncio.gather(*(talk(i, ws) for i, ws in enumerate(sockets)))
    seconds = time.perf_counter() - started
    client_cpu, server_cpu = time.process_time() - client_cpu, cpu_seconds(server_pids) - server_cpu
    await asyncio.gather(*(ws.close() for ws in sockets))

    latencies.sort()
    return {
        "clients": clients,
        "messages_per_client": messages,
        "replies": len(latencies),
        "seconds": round(seconds, 3),
        "messages_per_second": round(len(latencies) / seconds, 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "latency_p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 2),
        "connect_and_warm_up_seconds": round(connect_seconds, 3),
        # CPU while the messages are exchanged: the clients share the machine's cores with the servers
        "client_cpu_seconds": round(client_cpu, 2),
        "server_cpu_seconds": round(server_cpu, 2),
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


def run_workers(server: str, workers: int, clients: int, messages: int, timeout: float) -> dict[str, Any]:
    """The clients against ``workers`` worker processes over PostgreSQL, sharing one port."""
    dsn = asyncio.run(fresh_schema(server))
    port = free_port()
    env = {**os.environ, "BAF_BENCH_PORT": str(port)}
    command = [sys.executable, "-m", "baf.serve.process", "worker", str(WORKER_AGENT), "--log", dsn,
               "--lease-ttl", "30", "--poll-interval", "2"]  # fmt: skip
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(workers)]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("READY"):
                raise SystemExit(f"a worker did not start: {line!r}")
        run = run_clients(port, [p.pid for p in processes], clients, messages)
        return asyncio.run(asyncio.wait_for(run, timeout))
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
            if process.stdout is not None:
                process.stdout.close()


def run_in_memory(clients: int, messages: int, timeout: float) -> dict[str, Any]:
    """The clients against one process with an in-memory log (the figure this bench always reported)."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        return asyncio.run(asyncio.wait_for(run_clients(port, [server.pid], clients, messages), timeout))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000, help="concurrent clients (default 1000)")
    parser.add_argument("--messages", type=int, default=5, help="messages each client sends (default 5)")
    parser.add_argument("--timeout", type=float, default=300, help="give up after this many seconds")
    parser.add_argument("--postgres", action="store_true", help="also run one and two baf serve workers on PostgreSQL")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    if not 1 <= args.clients <= 10_000 or not 1 <= args.messages <= 1000:
        raise SystemExit("--clients must be 1..10000 and --messages 1..1000")
    raise_fd_limit(args.clients * 2 + 256)  # the children inherit the raised limit
    clients, messages, timeout = args.clients, args.messages, args.timeout
    if not args.postgres:
        result = run_in_memory(clients, messages, timeout)
        result["python"] = sys.version.split()[0]
        result["cpus"] = os.cpu_count()
        print(json.dumps(result, indent=2))
        return
    server, cluster = postgres_server()
    try:
        results = [
            measured("one process, memory log", lambda: run_in_memory(clients, messages, timeout)),
            measured("postgres x1 worker", lambda: run_workers(server, 1, clients, messages, timeout)),
            measured("postgres x2 workers, one port", lambda: run_workers(server, 2, clients, messages, timeout)),
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
    }
    print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results,
                      "summary": summary}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
