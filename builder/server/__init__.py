"""The model server that runs inside serving images: TensorFlow Serving's REST API, the Open Inference Protocol
and gRPC over the runtimes of `builder.model`.

Only this package, `builder.model` and `builder.measure` (plus the few modules they import and the
stdlib-only guard) are copied into an image, so it needs only its own small dependencies (numpy, LiteRT,
FastAPI, uvicorn; OpenVINO and NNCF where that runtime is chosen; TensorFlow in the TensorFlow serving image).
Modules, one idea each: `options` (the server's options, listed once), `protocol` (TF Serving's JSON in and
out, pure), `tensor_json` (numeric JSON straight into numpy), `tfs_rest`, `v2` and `grpc_service` (the three
protocols, translating only), `dataplane` (lookup, readiness, metadata, inference and their bookkeeping),
`answers` (the one error renderer), `pool` (a thread-safe pool of backends and the start-up self-test),
`batching`, `config` (what to serve and how, and its JSON form for worker processes), `loading` (configured
models loaded, warmed and put behind batchers), `app` (the ASGI app) and `process` (uvicorn, draining,
worker processes).
"""
