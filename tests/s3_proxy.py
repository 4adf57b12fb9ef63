"""A fault-injecting HTTP proxy in front of the moto S3 server, driven by the test.

Clients point their endpoint at ``proxy.url``; every request is forwarded to the server over
real sockets unless a planted fault matches it first. A fault answers the next ``times``
matching requests (optionally only one method, or keys containing a string) with one of:

- ``throttle``: ``503 SlowDown`` with the XML error body S3 sends (no body to a HEAD, as S3);
- ``reset``: the connection reset (RST) before any byte of the answer;
- ``close``: the connection closed (FIN) before any byte of the answer, the request never
  forwarded (a server or load balancer that drops it);
- ``lost``: the request forwarded and answered, the answer not sent on: the connection closed
  (FIN) before any byte of it (a write that went through, unconfirmed);
- ``reset-mid``: the server's status line, headers and half the body, then RST;
- ``short``: the headers (with the server's Content-Length), fewer bytes, then a plain close;
- ``delay``: the request forwarded after ``seconds``.

It also counts what passes (requests per method, body bytes sent back), which the benchmark
uses as its server-side figures, and logs each request's path and query (a LIST's prefix). One thread per client connection; keep-alive is kept.
moto's server closes its connection after every answer (``Connection: close``), and the proxy
passes that on unless made with ``keep_alive=True``: then the client's connection stays open,
as S3's do, and the next request goes to the server on a new one (the benchmarks' setting).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

KINDS = ("throttle", "reset", "close", "lost", "reset-mid", "short", "delay")

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>CACHEDOCTORPROXY</RequestId><HostId>proxy</HostId></Error>"
)


@dataclass
class Fault:
    kind: str
    times: int
    method: str | None = None
    key: str | None = None
    seconds: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        return self.key is None or self.key in path


class _Closed(Exception):
    """The peer closed the connection."""


class _Reader:
    """Buffered reads of one socket: lines for the head, exact counts for the body."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise _Closed
        self.buffer += chunk

    def head(self) -> bytes:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def exact(self, count: int) -> bytes:
        while len(self.buffer) < count:
            self._more()
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._more()
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line + b"\r\n"

    def chunked(self) -> bytes:
        """A chunked body, re-encoded as it came (sizes, data, trailers)."""
        out = b""
        while True:
            size_line = self.line()
            out += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:
                    trailer = self.line()
                    out += trailer
                    if trailer == b"\r\n":
                        return out
            out += self.exact(size + 2)

    def rest(self) -> bytes:
        """Everything until the peer closes (a response with neither length nor chunks)."""
        try:
            while True:
                self._more()
        except (_Closed, OSError):
            pass
        data, self.buffer = self.buffer, b""
        return data


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    found: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            found[name.strip().lower()] = value.strip()
    return found


def _body(reader: _Reader, headers: dict[str, str], bodiless: bool) -> tuple[bytes, bool]:
    """The message body, and whether the connection must close after it."""
    if bodiless:
        return b"", False
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return reader.chunked(), False
    if "content-length" in headers:
        return reader.exact(int(headers["content-length"])), False
    return reader.rest(), True


def _without(head: bytes, name: str) -> bytes:
    lines = head.split(b"\r\n")
    kept = [line for line in lines if line.split(b":", 1)[0].strip().lower() != name.encode()]
    return b"\r\n".join(kept)


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the kernel sends RST, not FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class S3Proxy:
    """``127.0.0.1:<random port>`` -> ``upstream`` (the moto server's URL)."""

    def __init__(self, upstream: str, keep_alive: bool = False) -> None:
        parts = urlsplit(upstream)
        self.keep_alive = keep_alive
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: list[Fault] = []
        self.requests: Counter[str] = Counter()  # per method, forwarded or not
        self.log: list[tuple[str, str]] = []  # (method, unquoted path), in arrival order
        self.queries: list[tuple[str, str, str]] = []  # (method, unquoted path, unquoted query): a LIST's prefix
        self.injected: Counter[str] = Counter()  # faults applied, per kind
        self.body_bytes = 0  # response body bytes sent to clients
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._open: set[socket.socket] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, name="s3-proxy", daemon=True)
        self._thread.start()

    # -- the test's controls --------------------------------------------------------------------

    def fail(
        self, kind: str, times: int = 1, method: str | None = None, key: str | None = None, seconds: float = 0.0
    ) -> Fault:
        """Answer the next ``times`` matching requests with ``kind`` (see the module doc)."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {KINDS}")
        fault = Fault(kind, times, method, key, seconds)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()
            self.requests.clear()
            self.log.clear()
            self.queries.clear()
            self.injected.clear()
            self.body_bytes = 0

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(self.requests.values()) if method is None else self.requests[method]

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                try:
                    sock.close()
                except OSError:
                    pass
            self._open.clear()

    def __enter__(self) -> S3Proxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- the proxy -------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _take(self, method: str, path: str, query: str = "") -> Fault | None:
        with self._lock:
            self.requests[method] += 1
            self.log.append((method, path))
            self.queries.append((method, path, query))
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, path):
                    fault.times -= 1
                    self.injected[fault.kind] += 1
                    return fault
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            reader = _Reader(client)
            up_reader: _Reader | None = None
            while True:
                head = reader.head()
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                method, target = request_line.split(" ")[:2]
                headers = _headers(head)
                if headers.get("expect", "").lower() == "100-continue":
                    # botocore waits for the go-ahead before a PUT's body: give it here, and
                    # forward the request without the header (the server sees a plain PUT)
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = _without(head, "expect")
                body, _ = _body(reader, headers, bodiless=False) if self._has_body(headers) else (b"", False)
                fault = self._take(method, unquote(urlsplit(target).path), unquote(urlsplit(target).query))
                if fault is not None and fault.kind == "throttle":
                    # a HEAD's answer has the headers alone: a body after it would be read as
                    # the next answer's status line
                    client.sendall(
                        b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                        + f"Content-Length: {len(SLOWDOWN_BODY)}\r\n\r\n".encode()
                        + (b"" if method == "HEAD" else SLOWDOWN_BODY)
                    )
                    continue
                if fault is not None and fault.kind == "reset":
                    _reset(client)
                    return
                if fault is not None and fault.kind == "close":
                    client.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None and fault.kind == "delay":
                    time.sleep(fault.seconds)
                if upstream is None:
                    upstream = socket.create_connection(self.upstream)
                    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    up_reader = _Reader(upstream)
                assert up_reader is not None
                try:
                    upstream.sendall(head + body)
                    answer = up_reader.head()
                except (_Closed, OSError):  # the server dropped an idle connection: once more, afresh
                    upstream.close()
                    upstream = socket.create_connection(self.upstream)
                    up_reader = _Reader(upstream)
                    upstream.sendall(head + body)
                    answer = up_reader.head()
                status = int(answer.split(b" ", 2)[1])
                answer_headers = _headers(answer)
                bodiless = method == "HEAD" or status in (204, 304) or 100 <= status < 200
                answer_body, must_close = _body(up_reader, answer_headers, bodiless)
                if fault is not None and fault.kind == "lost":
                    client.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None and fault.kind in ("reset-mid", "short"):
                    client.sendall(answer + answer_body[: len(answer_body) // 2])
                    if fault.kind == "reset-mid":
                        _reset(client)
                    else:
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                    return
                server_closes = answer_headers.get("connection", "").lower() == "close"
                if server_closes and self.keep_alive and not must_close:
                    answer = _without(answer, "connection")
                client.sendall(answer + answer_body)
                with self._lock:
                    self.body_bytes += len(answer_body)
                if must_close or (server_closes and not self.keep_alive):
                    return
                if server_closes:  # the client's connection stays; the server's is done
                    upstream.close()
                    upstream = None
        except (_Closed, OSError, ValueError, IndexError):
            return
        finally:
            with self._lock:
                self._open.discard(client)
            try:
                client.close()
            except OSError:
                pass
            if upstream is not None:
                upstream.close()

    @staticmethod
    def _has_body(headers: dict[str, str]) -> bool:
        return "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
