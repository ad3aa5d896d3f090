"""One Python load of a SavedModel for a run of conversions of it, instead of two per conversion.

TensorFlow 2.21's TFLite converter loads the whole SavedModel in Python twice for each file it writes:
`TFLiteConverter.from_saved_model` to check the signature keys, and `convert()` again only to read the graph's
debug info (error messages), then it converts from the folder itself (MLIR's importer). OpenVINO's converter
needs a loaded signature function too. For MobileNetV2 each load costs about 1.2 CPU seconds, and optimize
converts the served SavedModel three times (dynamic, float16, int8) and to OpenVINO's IR: seven loads where
one serves them all. What is converted is the same folder, the same keys, the same settings: the files come
out byte for byte the same (checked on MobileNetV2 for fp32, dynamic, float16 and int8).

`shared()` holds each folder's loaded object for the block and makes the converter's own load use it; the
objects are only read (signatures, debug info), never changed. After reading the debug info, `convert()` drops
its loaded object and forces a full garbage collection to free it (0.2 s for the digits CNN, about 0.8 s for
MobileNetV2, at every conversion); here that object is the one held for the block, so the collection frees
nothing of it and is skipped inside the block (Python's own collections go on as ever).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

#: (folder) -> the loaded SavedModel (tags: serving).
Load = Callable[[Path], Any]


def memoized(load: Callable[..., Any], seed: Mapping[tuple[str, frozenset[str] | None], Any] | None = None
             ) -> tuple[Callable[..., Any], dict[tuple[str, frozenset[str] | None], Any]]:
    """`load(path, tags=None)` remembering each (folder, tags) it loaded, starting from `seed` (by `folder_key`);
    (the function, its memory)."""
    memory: dict[tuple[str, frozenset[str] | None], Any] = dict(seed or {})

    def once(path: Any, tags: Any = None) -> Any:
        key = folder_key(path, tags)
        if key not in memory:
            memory[key] = load(path, tags)
        return memory[key]

    return once, memory


def folder_key(path: Any, tags: Any = None) -> tuple[str, frozenset[str] | None]:
    return str(Path(path).resolve()), None if tags is None else frozenset(tags)


@contextlib.contextmanager
def shared(loaded: Mapping[Path, Any] | None = None) -> Iterator[Load]:
    """A `load(folder)` that loads each SavedModel folder once for the block, and the TFLite converter's own
    loads going through it (TensorFlow's `lite._load`, restored afterwards). Where that internal has moved in
    another TensorFlow, the converter loads as it always did: slower, never different. `loaded`: folders
    loaded already (with the serving tag, the only MetaGraph a TensorFlow 2 SavedModel has), by folder."""
    from builder.optimize import tfenv

    tf = tfenv.tensorflow()
    try:
        from tensorflow.lite.python import lite
    except ImportError:  # pragma: no cover - a TensorFlow without the TFLite converter module
        lite = None
    original = getattr(lite, "_load", None)
    seed = {folder_key(folder, {tf.saved_model.SERVING}): obj for folder, obj in (loaded or {}).items()}
    once, memory = memoized(original if original is not None else
                            (lambda path, tags=None: tf.saved_model.load(str(path), tags)), seed)
    collector = getattr(lite, "gc", None)
    if lite is not None and original is not None:
        lite._load = once
        if collector is not None:
            lite.gc = _NoForcedCollection(collector)
    try:
        yield lambda folder: once(folder, {tf.saved_model.SERVING})
    finally:
        if lite is not None and original is not None:
            lite._load = original
            if collector is not None:
                lite.gc = collector
        memory.clear()


class _NoForcedCollection:
    """The `gc` module as TensorFlow's converter module sees it inside `shared()`: `collect()` does nothing (what
    it would free is held on purpose), everything else is the module's own."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def collect(self, *_: Any, **__: Any) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)
