"""Ports nobody else can take: the server refuses a REST or gRPC port another process holds.

Linux lets several sockets listen on one port only when every one of them sets SO_REUSEPORT (and they belong
to the same user). gRPC sets it by default, so without care a second server on the same `--grpc-port` starts
and silently takes part of the first one's calls. The rules here:

- REST: the front binds its own socket (SO_REUSEADDR for restarts over TIME_WAIT, never SO_REUSEPORT) before
  loading any model, and serves on it itself; model processes never listen. A taken port is refused at once
  and there is no window: the socket is ours from the check on.
- gRPC: the port is checked with a bind without SO_REUSEPORT, and the front's gRPC server listens with
  `grpc.so_reuseport` = 0, so nothing can join it afterwards; model processes never listen.

The remaining race window: between the gRPC check and the moment gRPC listens (the time the models take to
load: seconds, more for a large SavedModel), another process can bind the port first. Then our gRPC server
fails to start and the server exits; it never ends up sharing the port.
"""

from __future__ import annotations

import socket

from builder.errors import InputError


class PortTaken(InputError):
    """The port is held by another process; `str()` is the one-line message."""


def _family(address: str) -> socket.AddressFamily:
    """IPv6 for an address with a colon, else IPv4 (as the front and gRPC bind, so the check binds alike)."""
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _taken(what: str, flag: str, address: str, port: int, error: OSError) -> PortTaken:
    cause = (error.strerror or str(error)).splitlines()[0] if str(error) else type(error).__name__
    return PortTaken(f"{what} port {port} on {address} is taken by another process ({cause}); stop that process "
                     f"or choose another port with {flag}")


def _bound(address: str, port: int, what: str, flag: str) -> socket.socket:
    sock = socket.socket(_family(address), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart may bind over TIME_WAIT
        sock.bind((address.strip("[]"), port))
    except OSError as error:
        sock.close()
        raise _taken(what, flag, address, port, error) from error
    return sock


def bind_rest(address: str, port: int) -> socket.socket:
    """The REST listening socket, bound (not yet listening) without SO_REUSEPORT and not inherited by any
    process started from here; PortTaken when another process holds the port."""
    sock = _bound(address, port, "REST", "--port")
    sock.set_inheritable(False)
    return sock


def check_free(address: str, port: int, what: str = "gRPC", flag: str = "--grpc-port") -> None:
    """PortTaken unless a bind without SO_REUSEPORT succeeds now: nobody, SO_REUSEPORT or not, listens there."""
    if port == 0:
        return
    _bound(address, port, what, flag).close()
