"""The runtime registry (`builder.model.registry`): every serving runtime defined once, every list derived."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from builder.errors import InputError
from builder.model import registry

PACKAGE = Path(__file__).resolve().parents[2] / "builder"


def test_names_are_unique_and_each_list_is_derived() -> None:
    from builder.packaging.kinds import LiteRTKind, TensorFlowKind
    from builder.server.options import RUNTIME_CHOICES

    assert len(set(registry.NAMES)) == len(registry.NAMES)
    assert RUNTIME_CHOICES == registry.CHOICES == ("auto", *registry.NAMES)
    assert set(LiteRTKind.runtimes) == {r.name for r in registry.RUNTIMES if r.tflite}
    assert set(TensorFlowKind.runtimes) >= set(registry.engine_runtimes("tensorflow"))
    assert registry.APPROXIMATE == tuple(r.name for r in registry.RUNTIMES if r.approximate)


def test_every_precision_candidate_reads_only_float_files_and_is_approximate() -> None:
    for entry in registry.RUNTIMES:
        if entry.precision in ("bf16", "int8"):
            assert entry.approximate, entry.name
            assert not any(f in ("tflite_int8", "tflite_qat_int8", "tflite_dynamic") for f in entry.reads)
    exact = {r.engine: r.rank for r in registry.RUNTIMES if not r.approximate}
    for entry in registry.RUNTIMES:  # within noise, the exact answer of the same engine wins the tie
        if entry.approximate:
            assert entry.rank > exact[entry.engine], entry.name


def test_an_unknown_name_is_refused_once_with_every_choice() -> None:
    with pytest.raises(InputError, match="unknown runtime 'tflite'; choose one of: litert, openvino"):
        registry.runtime("tflite")
    with pytest.raises(InputError, match="choose one of: auto, litert"):
        registry.check("tflite", allow_auto=True)
    assert registry.check("auto", allow_auto=True) == "auto"
    with pytest.raises(InputError, match="'openvino-nncf' is gone: it quantized .* when the server started"):
        registry.runtime("openvino-nncf")  # what replaced it is said, in one line
    assert registry.on_tensorflow("tensorflow-bf16") and not registry.on_tensorflow("openvino")


ENGINES = {r.engine for r in registry.RUNTIMES}


def _literal_lists(root: Path = PACKAGE) -> list[tuple[str, int, list[str]]]:
    """Literal lists in builder/ that name serving runtimes: (file, line, names).

    Two kinds: a tuple/list/set/dict literal naming two or more runtimes one of which is a precision variant
    (`openvino-bf16`: never an engine, an image kind or a package name, which share the plain words), and any
    module-level name with RUNTIME in it bound to a literal of strings.
    """
    names = set(registry.NAMES)
    found = []
    for path in root.rglob("*.py"):
        where = str(path.relative_to(root))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            elements = (node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set))
                        else node.keys if isinstance(node, ast.Dict) else [])
            values = {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(values & names) >= 2 and (values & names) - ENGINES:
                found.append((where, node.lineno, sorted(values & names)))
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                labels = [t.id for t in targets if isinstance(t, ast.Name) and "RUNTIME" in t.id]
                value = node.value
                if labels and isinstance(value, (ast.Tuple, ast.List, ast.Set)) and value.elts and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
                    found.append((where, node.lineno, labels))
    return found


def test_runtime_names_are_listed_in_one_module() -> None:
    outside = [(f, line, n) for f, line, n in _literal_lists() if f != "model/registry.py"]
    assert not outside, outside


def test_the_listing_check_sees_a_list_written_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text('RUNTIME_CHOICES = ("litert", "openvino")\n'
                                     'def f():\n    return {"openvino-bf16": 1, "litert": 2}\n'
                                     'KINDS = ("litert", "tensorflow")  # image kinds share the plain words\n')
    assert [(line, names) for _, line, names in _literal_lists(tmp_path)] == [
        (3, ["litert", "openvino-bf16"]), (1, ["RUNTIME_CHOICES"])]


def test_a_litert_string_tensor_is_the_one_string_spelling() -> None:
    """LiteRT reports a string tensor as numpy's bytes_; every backend and the wire spell it `object`, so the
    served metadata says DT_STRING / BYTES and requests with text are read as text."""
    import numpy as np

    from builder.model.backend import _spec
    from builder.model.signature import STRING

    text = _spec("city", {"dtype": np.bytes_, "shape": np.array([1, 1]), "shape_signature": np.array([-1, 1])})
    assert text.dtype == STRING and text.shape == (None, 1)
    assert _spec("x", {"dtype": np.float32, "shape": np.array([1, 3]), "shape_signature": np.array([-1, 3])}).dtype == "float32"
