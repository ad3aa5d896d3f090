"""The server's front with no model behind it: the floor under what the server costs a request on this host.

`serve_scaling` starts this as a process of its own and loads it exactly as it loads a server: the same
HTTP/1.1 front (`http_front`) and the same gRPC front (`grpc_front.front_handlers`) on the same event loop,
but every request is answered with a fixed body of `ANSWER_BYTES` bytes, after `GAP_SECONDS` of idle
waiting. With a gap of 0 it is the front's own cost back to back; with a gap as long as the model's call it
is what receiving and answering cost once the core has sat idle that long, as it does while a model process
(or another core) runs the model. Nothing here decodes a request: whatever a server costs beyond these
figures is its own work.

    python -m tests.benchmarks.front_alone HTTP_PORT GRPC_PORT GAP_SECONDS ANSWER_BYTES
"""

from __future__ import annotations

import asyncio
import socket
import sys

from builder.server.front import grpc_front
from builder.server.process.messages import GRPC, HTTP, Answer, Request
from builder.server.front.http_front import HttpFront

MAX_BODY_BYTES = 64 * 1024 * 1024


async def serve(http_port: int, grpc_port: int, gap_s: float, answer_bytes: int) -> None:
    body = b"0" * answer_bytes
    answers = {HTTP: Answer(200, body, ((b"content-type", b"application/json"),)), GRPC: Answer(0, body)}

    async def answer(request: Request) -> Answer:
        if gap_s:
            await asyncio.sleep(gap_s)
        return answers[request.kind]  # a gRPC answer's status is gRPC's: 0 is OK

    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", http_port))
    front = HttpFront(answer, MAX_BODY_BYTES)
    await front.start(listening)
    server, _ = await grpc_front.start(answer, "127.0.0.1", grpc_port, MAX_BODY_BYTES)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop(None)


def main(argv: list[str]) -> None:
    import uvloop

    http_port, grpc_port, gap_s, answer_bytes = int(argv[0]), int(argv[1]), float(argv[2]), int(argv[3])
    uvloop.run(serve(http_port, grpc_port, gap_s, answer_bytes))


if __name__ == "__main__":
    main(sys.argv[1:])
