"""A seeded, property-style model generator: small models composed from a catalog of what users build, each run
through `tfsmith optimize` -> `tfsmith serve` -> REST, gRPC and v2 clients compared with the original.

- `catalog`  what users build, as frozen data: layer families and their variants, Keras 3 / tf_keras / tf.Module,
             save formats (.keras, .h5, SavedModel, .tflite incl. full-integer uint8/int8), single/list/dict
             inputs and outputs, auxiliary dtypes (bool, int64, uint8, rank-1), precisions, heads and labels.
- `composer` pure and seeded: (seed, index) -> `ModelSpec`; families round-robin in a seeded order, every other
             choice drawn from what the family allows. An id (`s<seed>-<index>-...`) rebuilds its spec.
- `data`     synthetic inputs and labels (a fixed random teacher), DATA in the form tfsmith reads.
- `build`    run as a subprocess (`python -m tests.modelgen.build OUT SPECS.json`): trains briefly, saves as the
             user would, and records the ORIGINAL's contract and answers from the saved file.
- `runner`   one built model through optimize, serve and every client; an `Outcome` with a one-line failure.

Used by tests/e2e/test_model_generator.py (a fixed set per `make test`) and tests/benchmarks/model_sweep.py (a
larger sweep that tabulates what went through and the failure classes).
"""
