"""The wire formats tfsmith's server speaks, in one place for both ends: the server parses with them, and the
smoke test, bench and the benchmarks write requests and read answers with them, without importing the server.

- `tfs_proto`: TensorFlow Serving's protobuf messages (PredictRequest, GetModelMetadata, ModelService...),
  built from descriptors at import: no generated stubs, no TensorFlow.
- `tensors`: TensorFlow's TensorProto <-> numpy, as TensorFlow reads and writes it; the dtype table.
- `v2_binary`: the Open Inference Protocol's binary tensor data extension (header, framing, datatypes).

Standard library, numpy and protobuf only: serving images carry this package beside the server.
"""
