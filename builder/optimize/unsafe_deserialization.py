"""`--import builder.optimize.unsafe_deserialization`: load a Keras model whose `Lambda` layers hold Python code.

Keras's safe mode refuses to deserialize a `Lambda` layer holding a Python lambda, because loading it runs
code stored in the file. Importing this module turns safe mode off for this one `tfsmith optimize` run, in
Keras 3 and in Keras 2 (tf_keras), exactly as a module of your own calling
`keras.config.enable_unsafe_deserialization()` would. Do it only for a file you trust: what it holds runs on
this machine. The SavedModel optimize writes carries the traced graph, not the Python code, so serving it
needs neither this module nor your code.
"""

from __future__ import annotations

from builder.optimize import tfenv

tfenv.tensorflow()  # TF_USE_LEGACY_KERAS and the thread set-up first, as for every import of TensorFlow here

import keras  # noqa: E402  (Keras 3)

keras.config.enable_unsafe_deserialization()
try:  # Keras 2 keeps the switch out of its public API (tf_keras 2.21 has no keras.config)
    from tf_keras.src.saving import serialization_lib  # noqa: E402
except ImportError:  # pragma: no cover - tf_keras is part of the optimize extra
    serialization_lib = None
else:
    serialization_lib.enable_unsafe_deserialization()
