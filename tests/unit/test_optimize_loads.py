"""One load per SavedModel folder for a run of conversions (`builder.optimize.loads`), and tfmot imported
without Keras 3 (`builder.optimize.tfenv.tfmot_keras_hidden`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.optimize import loads, tfenv


def test_memoized_loads_each_folder_and_tags_once(tmp_path: Path) -> None:
    calls: list[tuple[str, object]] = []

    def load(path: object, tags: object = None) -> object:
        calls.append((str(path), tags))
        return object()

    once, memory = loads.memoized(load)
    first = once(tmp_path / "sm", {"serve"})
    assert once(str(tmp_path / "sm"), ["serve"]) is first  # the same folder and tags, spelled otherwise
    assert once(tmp_path / "sm" / ".." / "sm", {"serve"}) is first
    other_tags = once(tmp_path / "sm", None)
    other_folder = once(tmp_path / "other", {"serve"})
    assert other_tags is not first and other_folder is not first
    assert len(calls) == 3 and len(memory) == 3


def test_keras_hidden_only_while_tfmot_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfenv, "keras3_installed", lambda: True)
    modules: dict = {}
    with tfenv.tfmot_keras_hidden(modules):
        assert "keras" in modules and modules["keras"] is None  # `import keras` fails at once here
    assert "keras" not in modules  # and imports as ever afterwards


def test_keras_left_alone_when_imported_or_not_keras3(monkeypatch: pytest.MonkeyPatch) -> None:
    imported = object()
    monkeypatch.setattr(tfenv, "keras3_installed", lambda: True)
    modules: dict = {"keras": imported}
    with tfenv.tfmot_keras_hidden(modules):
        assert modules["keras"] is imported
    assert modules["keras"] is imported
    monkeypatch.setattr(tfenv, "keras3_installed", lambda: False)
    empty: dict = {}
    with tfenv.tfmot_keras_hidden(empty):
        assert "keras" not in empty
    assert empty == {}


def test_keras_imported_inside_the_block_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfenv, "keras3_installed", lambda: True)
    modules: dict = {}
    real = object()
    with tfenv.tfmot_keras_hidden(modules):
        modules["keras"] = real  # something replaced the mark with the module itself
    assert modules["keras"] is real


def test_a_folder_loaded_already_is_not_loaded_again(tmp_path: Path) -> None:
    calls: list[str] = []
    known = object()
    once, _ = loads.memoized(lambda path, tags=None: calls.append(str(path)) or object(),
                             {loads.folder_key(tmp_path / "sm", {"serve"}): known})
    assert once(tmp_path / "sm", ["serve"]) is known and calls == []
    assert once(tmp_path / "sm") is not known and len(calls) == 1  # other tags: loaded as asked


def test_the_converters_forced_collection_is_skipped_only_inside_the_block() -> None:
    import gc

    quiet = loads._NoForcedCollection(gc)
    assert quiet.collect() == 0 and quiet.collect(2) == 0
    assert quiet.isenabled is gc.isenabled  # everything else is the module's own
