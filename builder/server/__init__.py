"""The model server that runs inside serving images: TensorFlow Serving's REST API, the Open Inference Protocol
and gRPC over the runtimes of `builder.model`.

Only this package, `builder.model`, `builder.measure` and `builder.wire` (plus the few modules they import and
the stdlib-only guard) are copied into an image, so it needs only its own small dependencies (numpy, LiteRT,
httptools, uvloop, grpcio; OpenVINO and NNCF where that runtime is chosen; TensorFlow in the TensorFlow serving
image). Its rooms, as a request meets them (docs/design/server.md draws the picture):

    clients ─▶ front/ ──(the models in its own process, or the least busy model process: process/)──▶
               model_server (routes: the table) ─▶ protocols/ (translate) ─▶ core/ (one data plane) ─▶ the model

- `front/`: the process clients reach. `serve` (listening sockets, signals, TLS, draining), `http_front` (HTTP/1.1
  read into each connection's own buffer) and `framing` (how a body is framed and decoded, or why it is refused:
  the one body limit), `grpc_front` (gRPC calls handed over whole), `ports`, `access_log` (one line per request,
  written once), `model_processes` (the front's side of `--model-processes N`: the pool started, supervised,
  its metrics summed, its versions switched together), `balancer` (the least busy model process for each
  request, which the front's router hands it to) and `supervision` (when a dead process is replaced and when a
  crash loop stops the server).
- `process/`: the boundary and what is behind it. `messages` (a request, an answer and the control messages,
  typed), `channel` (them in shared memory between the front and a model process), `model_process` (one model
  process's life).
- `model_server`: the models answering every request handed over, through `routes` (every REST route and gRPC
  method declared once, with its handler; its router answers, forwards and counts every request), the same in
  the front's own process and in each model process.
- `protocols/`: the handlers, translating only. `tfs_rest` (TF Serving's REST routes and its JSON in and out),
  `v2`, `tfs_grpc` (the three protocols), `jsoncodec` (JSON text, typed arrays, numeric JSON straight into
  numpy), `answers` (JSON answers and the one error renderer), `health`, `openapi` (the document, from the
  route table).
- `core/`: what every request does whichever door it came through. `dataplane` (the served models and versions;
  lookup, readiness, metadata, inference), `call` (the call, request errors, the signature and shape rules),
  `runner` (a version's interpreters and how its calls run on them: `--dispatch`, dynamic batching),
  `self_test` (the start-up timing), `loading` (configured models loaded, warmed and put behind their runners),
  `reload` (versions that appear later), `model_config` (TF Serving's model config and version policies),
  `metrics`, `outcome`.
- Beside them: `options` (the server's options, listed once), `config` (what to serve and how, and its JSON form
  for model processes), `sizing` (processes × interpreters × threads × batching from the cores and the model's
  measured call). The wire formats are `builder.wire`'s.
"""
