"""A small key-value store over TCP, for the rendezvous of a process group.

Rank 0 serves it (a thread of its process); every rank, rank 0 included, is a client. Keys are
strings, values bytes. ``get`` and ``wait`` block until the keys exist or the timeout passes;
``add`` is an atomic counter (a barrier is ``add`` then ``wait`` for the count). A timeout, an
unreachable server or a closed connection raise :class:`DistributedTimeoutError` /
:class:`DistributedError` naming the operation, the key and the time allowed.

Wire format (both directions, all integers big-endian): a request is ``command`` (1 byte),
``timeout`` (float64 seconds), ``count`` (uint16) and ``count`` fields of ``length`` (uint32)
plus bytes; a reply is ``status`` (1 byte: 0 ok, 1 timed out, 2 bad request) and its fields.

Example::

    >>> server = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    >>> client = TCPStore("127.0.0.1", server.port, timeout=30)
    >>> client.set("id", b"\\x01\\x02"); server.get("id")
    b'\\x01\\x02'
    >>> server.add("count", 1), client.add("count", 1)
    (1, 2)
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from datetime import timedelta
from typing import Any

from ._errors import DistributedError, DistributedTimeoutError

__all__ = ["TCPStore", "as_seconds"]

_SET, _GET, _ADD, _WAIT, _CHECK, _DELETE = range(1, 7)
_OK, _TIMED_OUT, _BAD = 0, 1, 2
_HEAD = struct.Struct("!BdH")
_REPLY = struct.Struct("!BH")
_LEN = struct.Struct("!I")
# Extra seconds a client waits for the server's own timeout reply before giving up on it.
_SLACK = 5.0
_MAX_FIELD = 1 << 26  # 64 MiB: a store carries ids and counters, not tensors


def as_seconds(timeout: Any, op: str) -> float:
    """``timeout`` (seconds as a number, or a ``datetime.timedelta``) as a positive float."""
    if isinstance(timeout, timedelta):
        value = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        value = float(timeout)
    else:
        raise TypeError(
            f"{op}: timeout must be seconds (a number) or a datetime.timedelta, got "
            f"{type(timeout).__name__}"
        )
    if not value > 0:
        raise ValueError(f"{op}: timeout must be > 0 seconds, got {value}")
    return value


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _send_fields(sock: socket.socket, head: bytes, fields: list[bytes]) -> None:
    parts = [head]
    for f in fields:
        parts.append(_LEN.pack(len(f)))
        parts.append(f)
    sock.sendall(b"".join(parts))


def _recv_fields(sock: socket.socket, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
        if n > _MAX_FIELD:
            raise ConnectionError(f"field of {n} bytes exceeds the store's limit")
        out.append(_recv_exact(sock, n))
    return out


class _Server:
    """The store's data and its serving threads (one per connection)."""

    def __init__(self, host: str, port: int):
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.sock = socket.create_server((host, port), reuse_port=False, backlog=128)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._accept, name="ignis-store", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while not self.closed:
                try:
                    cmd, timeout, count = _HEAD.unpack(_recv_exact(conn, _HEAD.size))
                    fields = _recv_fields(conn, count)
                    status, reply = self._handle(cmd, timeout, fields)
                    _send_fields(conn, _REPLY.pack(status, len(reply)), reply)
                except (ConnectionError, OSError, struct.error):
                    return

    def _handle(self, cmd: int, timeout: float, fields: list[bytes]) -> tuple[int, list[bytes]]:
        keys = [f.decode() for f in fields]
        with self.cond:
            if cmd == _SET and len(fields) == 2:
                self.data[keys[0]] = fields[1]
                self.cond.notify_all()
                return _OK, []
            if cmd == _ADD and len(fields) == 2:
                value = int(self.data.get(keys[0], b"0")) + int(fields[1])
                self.data[keys[0]] = str(value).encode()
                self.cond.notify_all()
                return _OK, [self.data[keys[0]]]
            if cmd == _CHECK:
                return _OK, [b"1" if all(k in self.data for k in keys) else b"0"]
            if cmd == _DELETE and len(fields) == 1:
                found = self.data.pop(keys[0], None) is not None
                return _OK, [b"1" if found else b"0"]
            if cmd in (_GET, _WAIT) and fields:
                want = keys[:1] if cmd == _GET else keys
                ready = self.cond.wait_for(
                    lambda: self.closed or all(k in self.data for k in want), timeout
                )
                if not ready or self.closed:
                    return _TIMED_OUT, []
                return _OK, [self.data[keys[0]]] if cmd == _GET else []
        return _BAD, []

    def close(self) -> None:
        self.closed = True
        with self.cond:
            self.cond.notify_all()
        try:
            self.sock.close()
        except OSError:  # pragma: no cover
            pass


class TCPStore:
    """A client of the store at ``host:port``; with ``is_master=True`` it also serves it.

    Args:
        host: the server's address (``MASTER_ADDR``; the server binds it).
        port: its port (``MASTER_PORT``); 0 with ``is_master`` picks a free one (see ``port``).
        is_master: serve the store in this process (rank 0).
        timeout: seconds (or a timedelta) for connecting and for each blocking call.

    Attributes: ``host``, ``port``, ``timeout`` (seconds).
    """

    def __init__(self, host: str, port: int, *, is_master: bool = False, timeout: Any = 300.0):
        self.timeout = as_seconds(timeout, "TCPStore")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port < 65536:
            raise ValueError(f"TCPStore: port must be an int in [0, 65535], got {port!r}")
        if port == 0 and not is_master:
            raise ValueError("TCPStore: a client needs the server's port, got 0")
        self.host = host
        self._server = _Server(host, port) if is_master else None
        self.port = self._server.port if self._server is not None else port
        self._lock = threading.Lock()
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        last: Exception | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise DistributedTimeoutError(
                    f"TCPStore: could not connect to the store at {self.host}:{self.port} "
                    f"within {self.timeout:g} s (is rank 0 running?) ({last})"
                )
            try:
                sock = socket.create_connection((self.host, self.port), timeout=min(left, 5.0))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as exc:  # refused while rank 0 starts: try again shortly
                last = exc
                time.sleep(min(0.05, max(left, 0)))

    def _request(
        self, op: str, cmd: int, fields: list[bytes], timeout: float | None, what: str
    ) -> list[bytes]:
        wait = self.timeout if timeout is None else as_seconds(timeout, f"TCPStore.{op}")
        with self._lock:
            sock = self._sock
            if sock is None:
                raise DistributedError(f"TCPStore.{op}: the store has been closed")
            try:
                sock.settimeout(wait + _SLACK)
                _send_fields(sock, _HEAD.pack(cmd, wait, len(fields)), fields)
                status, count = _REPLY.unpack(_recv_exact(sock, _REPLY.size))
                reply = _recv_fields(sock, count)
            except TimeoutError:
                raise DistributedTimeoutError(
                    f"TCPStore.{op}({what}): the store at {self.host}:{self.port} did not "
                    f"answer within {wait + _SLACK:g} s"
                ) from None
            except (ConnectionError, OSError) as exc:
                raise DistributedError(
                    f"TCPStore.{op}({what}): lost the connection to the store at "
                    f"{self.host}:{self.port} (rank 0 may have exited): {exc}"
                ) from None
        if status == _TIMED_OUT:
            raise DistributedTimeoutError(
                f"TCPStore.{op}({what}): timed out after {wait:g} s waiting for the key(s)"
            )
        if status != _OK:  # pragma: no cover - the client only sends well-formed requests
            raise DistributedError(f"TCPStore.{op}({what}): the store refused the request")
        return reply

    @staticmethod
    def _key(key: Any, op: str) -> bytes:
        if not isinstance(key, str) or not key:
            raise TypeError(f"TCPStore.{op}: key must be a non-empty str, got {key!r}")
        return key.encode()

    def set(self, key: str, value: bytes | str) -> None:
        """Store ``value`` (bytes, or a str stored as UTF-8) under ``key``."""
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"TCPStore.set: value must be bytes or str, got {type(value).__name__}")
        self._request("set", _SET, [self._key(key, "set"), bytes(value)], None, repr(key))

    def get(self, key: str, timeout: Any = None) -> bytes:
        """The value of ``key``, waiting up to ``timeout`` seconds (default: the store's) for
        it to be set."""
        return self._request("get", _GET, [self._key(key, "get")], timeout, repr(key))[0]

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the integer at ``key`` (0 when missing) and return the new value."""
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise TypeError(f"TCPStore.add: amount must be an int, got {type(amount).__name__}")
        reply = self._request(
            "add", _ADD, [self._key(key, "add"), str(amount).encode()], None, repr(key)
        )
        return int(reply[0])

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        """Block until every key in ``keys`` is set (up to ``timeout`` seconds)."""
        if isinstance(keys, str):
            keys = [keys]
        fields = [self._key(k, "wait") for k in keys]
        if not fields:
            return
        self._request("wait", _WAIT, fields, timeout, ", ".join(map(repr, keys)))

    def check(self, keys: list[str]) -> bool:
        """True when every key in ``keys`` is set (never blocks)."""
        if isinstance(keys, str):
            keys = [keys]
        fields = [self._key(k, "check") for k in keys]
        return self._request("check", _CHECK, fields, None, ", ".join(map(repr, keys)))[0] == b"1"

    def delete_key(self, key: str) -> bool:
        """Remove ``key``; True when it existed."""
        return (
            self._request("delete_key", _DELETE, [self._key(key, "delete_key")], None, repr(key))[0]
            == b"1"
        )

    def close(self) -> None:
        """Close the connection (and stop serving, on rank 0). Idempotent."""
        sock, self._sock = getattr(self, "_sock", None), None
        if sock is not None:
            try:
                sock.close()
            except OSError:  # pragma: no cover
                pass
        server, self._server = getattr(self, "_server", None), None
        if server is not None:
            server.close()

    def __enter__(self) -> TCPStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "serving" if self._server is not None else "client of"
        return f"<TCPStore {role} {self.host}:{self.port}>"
