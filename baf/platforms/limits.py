"""Limits on what one client may ask of a server platform: connections, new sessions, messages per second.

A hostile or broken client must not be able to grow the server without bound: every new session costs
memory and log space, every message a log append and maybe a model call. :class:`ClientLimits` says how
much one connection, and one network address, may ask; :class:`RateLimiter` keeps the counts. Rates are
token buckets: a client may use a whole bucket at once (a burst), and it refills at a steady rate.

An "address" is what one client can cheaply have many of, counted as one (:func:`address_key`): every
loopback address (``127.0.0.0/8``, ``::1``, and IPv4-mapped forms) is this machine, and an IPv6 address
counts by its ``/64`` network, the block one host or one customer line is usually given.

Behind a reverse proxy every client has the proxy's address: raise the per-address limits (or set them to
``None``) there, and let the proxy limit per client.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["LOOPBACK_KEY", "ClientLimits", "ConnectionBudget", "RateLimiter", "TokenBucket", "address_key"]

#: The key every loopback address counts under.
LOOPBACK_KEY = "loopback"


def address_key(address: str) -> str:
    """The client a network address counts as for the per-address limits.

    - any loopback address (all of ``127.0.0.0/8`` reaches a server on ``127.0.0.1`` or ``0.0.0.0``, and
      ``::1`` one on ``::``): :data:`LOOPBACK_KEY`, one client, the machine itself;
    - an IPv4-mapped IPv6 address (``::ffff:192.0.2.7``, what a dual-stack socket reports): its IPv4 address;
    - another IPv6 address: its ``/64`` network (``2001:db8:1:2::/64``), since one host may use any address
      of the ``/64`` it was given (privacy addresses are made that way);
    - another IPv4 address: itself;
    - anything that is not an IP address (a Unix socket's path): itself.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # without an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return LOOPBACK_KEY
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """How much a client may ask of a server platform; ``None`` turns a limit off.

    Args:
        max_connections: Open connections at once, in all.
        max_connections_per_address: Open connections at once from one network address (see
            :func:`address_key` for what counts as one).
        new_sessions_per_connection: New sessions one connection may start per minute (a burst of this
            many, refilled evenly over the minute). Resuming a session is not a new session.
        new_sessions_per_address: New sessions all connections from one address may start per minute.
        messages_per_second: Frames one connection may send per second (every frame counts: a history
            request reads the log, a hello may start a session).
        messages_per_second_per_address: Frames all connections from one address may send per second.
    """

    max_connections: int | None = 1000
    max_connections_per_address: int | None = 100
    new_sessions_per_connection: int | None = 30
    new_sessions_per_address: int | None = 300
    messages_per_second: float | None = 50.0
    messages_per_second_per_address: float | None = 200.0

    def __post_init__(self) -> None:
        for name in ClientLimits.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
                raise ValueError(f"ClientLimits.{name} must be a positive number or None, got {value!r}")


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` tokens, refilled at ``rate`` per second; :meth:`take` spends one if there is one."""

    capacity: float
    rate: float
    tokens: float = math.nan
    updated: float = 0.0

    def __post_init__(self) -> None:
        if math.isnan(self.tokens):
            self.tokens = self.capacity

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def take(self, now: float) -> float:
        """Spend a token and return 0, or return the seconds until one is available (spending nothing)."""
        self._refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate

    def full(self, now: float) -> bool:
        """Whether the bucket has refilled completely (it then holds no information worth keeping)."""
        self._refill(now)
        return self.tokens >= self.capacity


def _bucket(per_window: float | None, window: float) -> TokenBucket | None:
    if per_window is None:
        return None
    return TokenBucket(capacity=max(1.0, float(per_window)), rate=per_window / window)


@dataclass(slots=True)
class _Address:
    connections: int = 0
    sessions: TokenBucket | None = None
    messages: TokenBucket | None = None


@dataclass(slots=True)
class ConnectionBudget:
    """The buckets of one connection (and of its address): ask before acting on a frame."""

    limiter: RateLimiter
    address: str
    sessions: TokenBucket | None = None
    messages: TokenBucket | None = None

    def message(self) -> float:
        """0 if one more frame may be handled now, else the seconds to wait."""
        return self.limiter.spend(self.address, self.messages, "messages")

    def new_session(self) -> float:
        """0 if one more session may be started now, else the seconds to wait."""
        return self.limiter.spend(self.address, self.sessions, "sessions")


@dataclass
class RateLimiter:
    """The counts behind :class:`ClientLimits` for one server: connections per address and the buckets.

    Only addresses with an open connection or a bucket that has not refilled are remembered, so a stream
    of clients from ever new addresses leaves nothing behind.
    """

    limits: ClientLimits
    clock: Callable[[], float] = time.monotonic
    connections: int = 0
    _addresses: dict[str, _Address] = field(default_factory=dict)

    def refusal(self, address: str) -> str | None:
        """Why a new connection from ``address`` is refused now, or ``None`` if it may open."""
        address = address_key(address)
        limits = self.limits
        if self.full:
            return f"the server has {self.connections} connections, its limit"
        known = self._addresses.get(address)
        per_address = limits.max_connections_per_address
        if per_address is not None and known is not None and known.connections >= per_address:
            return f"{known.connections} connections from this address are open, the limit per address"
        return None

    @property
    def full(self) -> bool:
        """Whether ``max_connections`` connections are open: no address may open another."""
        return self.limits.max_connections is not None and self.connections >= self.limits.max_connections

    def connect(self, address: str) -> ConnectionBudget | None:
        """Count a new connection from ``address`` (counted as :func:`address_key` says), or ``None`` when a
        limit refuses it (see :meth:`refusal`)."""
        if self.refusal(address) is not None:
            return None
        address = address_key(address)
        self.connections += 1
        self._entry(address).connections += 1
        limits = self.limits
        return ConnectionBudget(
            self,
            address,
            sessions=_bucket(limits.new_sessions_per_connection, 60.0),
            messages=_bucket(limits.messages_per_second, 1.0),
        )

    def disconnect(self, budget: ConnectionBudget) -> None:
        """Count a connection of ``budget`` as closed."""
        self.connections -= 1
        entry = self._addresses.get(budget.address)
        if entry is not None:
            entry.connections -= 1
            self._forget_if_idle(budget.address, entry)

    def spend(self, address: str, own: TokenBucket | None, kind: str) -> float:
        """Spend one token from the connection's bucket ``own`` and the address's ``kind`` bucket; 0 if
        both had one, else the longer wait (nothing is spent then)."""
        now = self.clock()
        entry = self._entry(address)
        shared = entry.sessions if kind == "sessions" else entry.messages
        waits = [bucket.take(now) for bucket in (own, shared) if bucket is not None]
        if any(waits):
            # Give back what one bucket took when the other refused: a refused frame costs nothing.
            for bucket, wait in zip((b for b in (own, shared) if b is not None), waits, strict=True):
                if wait == 0:
                    bucket.tokens += 1
            return max(waits)
        return 0.0

    def _entry(self, address: str) -> _Address:
        entry = self._addresses.get(address)
        if entry is None:
            limits = self.limits
            entry = _Address(
                sessions=_bucket(limits.new_sessions_per_address, 60.0),
                messages=_bucket(limits.messages_per_second_per_address, 1.0),
            )
            self._addresses[address] = entry
        return entry

    def _forget_if_idle(self, address: str, entry: _Address) -> None:
        now = self.clock()
        if _idle(entry, now):
            del self._addresses[address]
        # Clients that left while their buckets were not yet full: swept once they are many, so the cost
        # is spread over the connections that made them.
        if len(self._addresses) > 2 * self.connections + 1024:
            for other in [name for name, known in self._addresses.items() if _idle(known, now)]:
                del self._addresses[other]

    @property
    def addresses(self) -> int:
        """How many addresses are remembered (for tests and monitoring)."""
        return len(self._addresses)


def _idle(entry: _Address, now: float) -> bool:
    return entry.connections == 0 and all(b is None or b.full(now) for b in (entry.sessions, entry.messages))
