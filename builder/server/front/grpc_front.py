"""The front's gRPC: TensorFlow Serving's RPCs received (`grpc.aio`, on the same event loop as the front's HTTP)
and each call's serialized message handed whole to a model server (`answer`); nothing is decoded here, so the
front needs neither the data plane nor the model stack. A message over the body limit is refused here
(`framing.message_refusal`, RESOURCE_EXHAUSTED), told to `refused` so it is counted and logged. The methods
are the route table's (`routes.RPCS`); the model server's side is `tfs_grpc`.
The port is ours alone: SO_REUSEPORT is off, so no other process can join it (see `ports`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from builder.server.core.outcome import Outcome, outcome
from builder.server.front import ports
from builder.server.front.framing import message_refusal

from builder.server import routes
from builder.server.process.messages import GRPC, Answer, Request

#: The RPCs served, by service (the route table's).
RPCS: dict[str, tuple[str, ...]] = {}
for _rpc in routes.RPCS:
    RPCS[_rpc.service] = (*RPCS.get(_rpc.service, ()), _rpc.method)
#: gRPC status number -> code.
CODES = {code.value[0]: code for code in grpc.StatusCode}


#: Told of every call the front refuses itself (its outcome, method, path, client): counted, logged.
Refused = Callable[[Outcome, str, str, str], None]


def front_handlers(answer: Callable[[Request], Awaitable[Answer]], max_message_bytes: int,
                   refused: Refused | None = None) -> list[grpc.GenericRpcHandler]:
    """The RPCs as the front receives them: the serialized message handed whole to a model server (`answer`),
    its serialized reply or status code given back; nothing is decoded in the front. A message over
    `max_message_bytes` is refused here, and told to `refused`."""

    def handler(name: str) -> grpc.RpcMethodHandler:
        async def behavior(message: bytes, context: grpc.aio.ServicerContext) -> bytes:
            too_big = message_refusal(len(message), max_message_bytes)
            if too_big is not None:
                result = outcome(too_big.status, too_big.message)
                if refused is not None:
                    refused(result, "POST", name, context.peer())
                await context.abort(CODES[result.grpc], result.reason)
            answered = await answer(Request(GRPC, name, message, client=context.peer()))
            if answered.status:
                await context.abort(CODES.get(answered.status, grpc.StatusCode.INTERNAL), answered.message)
            return bytes(answered.body)

        return grpc.unary_unary_rpc_method_handler(behavior)

    return [grpc.method_handlers_generic_handler(service, {method: handler(f"/{service}/{method}")
                                                           for method in methods})
            for service, methods in RPCS.items()]


async def start(answer: Callable[[Request], Awaitable[Answer]], address: str, port: int, max_message_bytes: int,
                tls: tuple[Path, Path] | None = None,
                refused: Refused | None = None) -> tuple[grpc.aio.Server, int]:
    """The front's gRPC server, started on the running loop, and its bound port; `tls` is (certificate,
    key) files. The port is ours alone: SO_REUSEPORT is off, so no other process can join it (see `ports`).
    grpcio's own message limit is off: the front's (`framing`) refuses a message over `max_message_bytes`."""
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
               ("grpc.so_reuseport", 0)]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers(front_handlers(answer, max_message_bytes, refused))
    where = f"[{address}]:{port}" if ":" in address and not address.startswith("[") else f"{address}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(where)
        else:
            cert, key = tls
            credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
            bound = server.add_secure_port(where, credentials)
    except RuntimeError as error:  # grpcio reports a failed bind this way (older releases return 0)
        raise ports.PortTaken(f"gRPC could not listen on {where} (another process holds the port?): "
                              f"{str(error).splitlines()[0]}") from error
    if bound == 0:
        raise ports.PortTaken(f"gRPC could not listen on {where} (another process holds the port?)")
    await server.start()
    return server, bound
