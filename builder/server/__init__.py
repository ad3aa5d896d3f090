"""The model server that runs inside serving images: TensorFlow Serving's REST API over .tflite runtimes.

Only this package (plus `builder.errors`, `builder.digest` and the stdlib-only guard) is copied into an image,
so it imports nothing else of tfsmith and needs only its own small dependencies (numpy, LiteRT, FastAPI,
uvicorn; OpenVINO and NNCF where that runtime is chosen; TensorFlow in the TensorFlow serving image).
Modules, one idea each: `options` (the server's options, listed once), `protocol` (TF Serving's JSON in
and out, pure), `backends` (runtimes behind one interface, a thread-safe pool, the start-up self-test),
`tensorflow_backend` (SavedModels and TensorFlow's interpreter), `batching`, `artifacts` (what to serve
from a path), `config` (what to serve and how, and its JSON form for worker processes), `loading` (configured
models loaded, warmed and put behind batchers), `app` (the ASGI app) and `process` (uvicorn, draining,
worker processes).
"""
