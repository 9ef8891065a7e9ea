"""The REST client's HTTP transport against scripted peers on loopback: kept-alive connections the
server closed are replaced, and a server that accepts but never answers is a timeout, said once."""

from __future__ import annotations

import socket
import threading

import pytest

from reconciler.namespace.errors import OperationTimeoutError
from reconciler.namespace.retry import RetryPolicy
from reconciler.rest.client import ManagementRestClient

EMPTY_FEED = b'<feed xmlns="http://www.w3.org/2005/Atom"><title>topics</title></feed>'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/atom+xml;type=feed;charset=utf-8\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(EMPTY_FEED), EMPTY_FEED)
)


def request_line(conn: socket.socket) -> bytes:
    """Read one request's head; its first line."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


def client(port: int, timeout: float = 5.0) -> ManagementRestClient:
    return ManagementRestClient(
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true",
        timeout=timeout, retry=RetryPolicy(retries=0, throttled_retries=0),
    )


def test_a_kept_alive_connection_the_server_closed_is_replaced(serve):
    # The answer keeps the connection alive (HTTP/1.1, no "Connection: close"), then the server
    # closes it: the next GET finds it closed and goes again on a new connection.
    requests: list[bytes] = []

    def answer_once(conn: socket.socket) -> None:
        with conn:
            requests.append(request_line(conn))
            conn.sendall(ANSWER)

    with client(serve(answer_once)) as rest:
        assert rest.list_topics() == []
        assert rest.list_topics() == []
    assert len(requests) == 2  # one connection per GET: the closed one carried no request
    assert all(r.startswith(b"GET /$Resources/topics?$skip=0&$top=") for r in requests), requests


def test_a_server_that_accepts_but_never_answers_times_out_once(serve):
    requests: list[bytes] = []
    released = threading.Event()

    def never_answer(conn: socket.socket) -> None:
        with conn:
            requests.append(request_line(conn))
            released.wait(10)

    with client(serve(never_answer), timeout=0.5) as rest:
        with pytest.raises(OperationTimeoutError, match=r"list topics: no response in time"):
            rest.list_topics()
    released.set()
    assert len(requests) == 1
