"""The model server that runs inside serving images: TensorFlow Serving's REST API, the Open Inference Protocol
and gRPC over the runtimes of `builder.model`.

Only this package, `builder.model`, `builder.measure` and `builder.wire` (plus the few modules they import and
the stdlib-only guard) are copied into an image, so it needs only its own small dependencies (numpy, LiteRT,
FastAPI, httptools, uvloop; OpenVINO and NNCF where that runtime is chosen; TensorFlow in the TensorFlow serving image).
Modules, one idea each: `options` (the server's options, listed once), `sizing` (processes × interpreters ×
threads × batching from the cores and the model's measured call), `front` (the process: listening sockets,
signals, TLS, draining), `http_front` (HTTP/1.1 read into each connection's own buffer) and `framing` (how a
request's body is framed, or why it is refused), `model_processes` (the front's side of `--model-processes N`:
started, handed requests, supervised, metrics summed, versions switched together), `supervision` (when a dead
process is replaced and when a crash loop stops the server), `balancer` (the least busy model process for each
request), `channel` (requests and answers in shared memory between the front and a model process),
`messages` (a request, an answer and the control messages between them, typed), `model_process` (one model
process's life), `host` (the models answering the requests handed over), `protocol` (TF Serving's JSON in and
out, pure), `tensor_json` (numeric JSON straight into numpy), `tfs_rest`, `v2` and `grpc_service` (the three
protocols, translating only), `dataplane` (lookup, readiness, metadata, inference and their bookkeeping),
`answers` (the one error renderer), `pool` (a thread-safe pool of backends and the start-up self-test),
`batching`, `config` (what to serve and how, and its JSON form for model processes), `loading` (configured
models loaded, warmed and put behind batchers), `reload` (versions that appear later) and `app` (the ASGI app
for every route but the hot ones). The wire formats are `builder.wire`'s.
"""
