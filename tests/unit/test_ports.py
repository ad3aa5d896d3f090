"""The port rules on real loopback sockets: a port anyone listens on (with SO_REUSEPORT, as gRPC does, or
without) is refused in one line; a free one is taken; only our workers are told to share."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from builder.errors import InputError
from builder.server.front import ports


def _listener(reuse_port: bool) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.fixture(params=[False, True], ids=["plain", "so_reuseport"])
def held(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port another process would hold: listening, with or without SO_REUSEPORT."""
    sock = _listener(request.param)
    yield sock.getsockname()[1]
    sock.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_held_grpc_port_is_refused_in_one_line(held: int) -> None:
    with pytest.raises(ports.PortTaken) as caught:
        ports.check_free("127.0.0.1", held)
    message = str(caught.value)
    assert isinstance(caught.value, InputError)
    assert message == (f"gRPC port {held} on 127.0.0.1 is taken by another process (Address already in use); "
                       "stop that process or choose another port with --grpc-port")
    assert "\n" not in message


def test_a_held_rest_port_is_refused(held: int) -> None:
    with pytest.raises(ports.PortTaken, match=f"REST port {held} on 127.0.0.1 is taken .* with --port$"):
        ports.bind_rest("127.0.0.1", held)


def test_a_port_held_on_every_address_is_refused_on_loopback() -> None:
    with socket.socket() as everywhere:
        everywhere.bind(("0.0.0.0", 0))
        everywhere.listen()
        port = everywhere.getsockname()[1]
        with pytest.raises(ports.PortTaken):
            ports.check_free("127.0.0.1", port)


def test_a_free_port_passes_and_the_check_leaves_nothing_bound() -> None:
    port = _free_port()
    ports.check_free("127.0.0.1", port)
    ports.check_free("127.0.0.1", port)  # the check's socket is closed: checking again still passes
    ports.check_free("127.0.0.1", 0)  # no gRPC


def test_the_rest_socket_is_ours_until_closed() -> None:
    port = _free_port()
    sock = ports.bind_rest("127.0.0.1", port)
    try:
        assert sock.getsockname() == ("127.0.0.1", port)
        assert not sock.get_inheritable()  # the front alone serves on it
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 0
        sock.listen()
        with pytest.raises(ports.PortTaken):
            ports.bind_rest("127.0.0.1", port)
        with pytest.raises(ports.PortTaken):
            ports.check_free("127.0.0.1", port, "REST", "--port")
    finally:
        sock.close()
    ports.bind_rest("127.0.0.1", port).close()
