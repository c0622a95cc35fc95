"""A TCP relay in front of the test PostgreSQL server, for faults a store must survive: its connections cut
(as by a network fault or a server gone) and new ones refused; it counts the store's open connections.

The store talks to the real server through it (``Relay.dsn``); only the network between them is faked.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Relay"]


class Relay:
    """Relays connections from a local port to the server ``dsn`` names, until told otherwise."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        assert parts.hostname is not None and parts.port is not None, dsn
        self._target = (parts.hostname, parts.port)
        self._parts = parts
        self._server: asyncio.Server | None = None
        self._port = 0
        self._links: set[asyncio.StreamWriter] = set()

    @property
    def dsn(self) -> str:
        """The URL of the server through this relay (the same user, database and options)."""
        netloc = self._parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self._port}"
        return urlunsplit(self._parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))

    @property
    def open_connections(self) -> int:
        """The relayed connections open now (each counted once, from the client's side)."""
        return len(self._links) // 2

    async def start(self) -> None:
        """Listen (on the port it had, if it listened before: the store's URL stays right)."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def refuse(self) -> None:
        """Stop listening: a new connection is refused, as by a server that is down. Open ones stay."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def cut(self) -> None:
        """Close every relayed connection, both ends, as a network fault or a server restart would."""
        for writer in list(self._links):
            writer.transport.abort()

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.refuse()
        self.cut()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        link = (client_writer, server_writer)
        self._links.update(link)
        try:
            await asyncio.gather(
                self._pipe(client_reader, server_writer, link), self._pipe(server_reader, client_writer, link)
            )
        finally:
            for writer in link:
                self._links.discard(writer)
                writer.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        """Copy ``reader`` to ``writer`` until either end closes; then close the link, both sockets."""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        for end in link:
            end.transport.abort()
