"""Which versions to serve (TF Serving's version policies), the model config file, and how requests
resolve names, versions and labels — pure, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import InputError
from builder.server.core.model_config import ModelSource, read_config_file, version_folders
from builder.server.core.call import RequestError
from builder.server.core.dataplane import ModelSet, ServedModel


def test_version_policies() -> None:
    on_disk = [3, 1, 7, 5]
    assert ModelSource("m", Path("/")).wanted(on_disk) == [7]
    assert ModelSource("m", Path("/"), latest=2).wanted(on_disk) == [5, 7]
    assert ModelSource("m", Path("/"), policy="all").wanted(on_disk) == [1, 3, 5, 7]
    assert ModelSource("m", Path("/"), policy="specific", specific=(3, 9)).wanted(on_disk) == [3]
    assert ModelSource("m", Path("/")).wanted([]) == []


def test_config_file_is_read_with_tf_servings_field_names(tmp_path: Path) -> None:
    (tmp_path / "a" / "1").mkdir(parents=True)
    (tmp_path / "a" / "1" / "model.tflite").write_bytes(b"")
    (tmp_path / "a" / "x").mkdir()
    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "a" base_path: "a" model_platform: "tensorflow" '
                      'model_version_policy { latest { num_versions: 2 } } '
                      'version_labels { key: "stable" value: 1 } } }')
    [source] = read_config_file(config)
    assert (source.name, source.base_path, source.policy, source.latest, source.labels) == (
        "a", tmp_path / "a", "latest", 2, {"stable": 1})
    assert list(version_folders(source.base_path)) == [1]  # `x` is not a version, an empty folder holds no model
    config.write_text('model_config_list { config { name: "a" base_path: "a" oops: 1 } }')
    with pytest.raises(InputError, match="oops"):
        read_config_file(config)
    config.write_text('model_config_list { config { name: "a" base_path: "a" } config { name: "a" base_path: "a" } }')
    with pytest.raises(InputError, match="configured twice"):
        read_config_file(config)


def _served(name: str, version: int) -> ServedModel:
    return ServedModel(name=name, version=version, signatures={}, batcher=None, runtime="litert")  # type: ignore[arg-type]


def test_requests_resolve_latest_versions_and_labels() -> None:
    models = ModelSet()
    models.set("m", {1: _served("m", 1), 4: _served("m", 4)}, {"stable": 1, "gone": 9})
    assert models.get("m").version == 4 and models.get("m", 1).version == 1
    assert models.get("m", label="stable").version == 1
    assert models.labels["m"] == {"stable": 1}  # a label of a version not served is dropped
    for name, version, label in (("x", None, None), ("m", 2, None), ("m", None, "canary")):
        with pytest.raises(RequestError) as error:
            models.get(name, version, label)
        assert error.value.status == 404
    assert not models.ready  # nothing warmed yet
    for served in models.all():
        served.ready = True
    assert models.ready
    models.draining = True
    assert not models.ready


def test_a_version_folder_may_hold_an_openvino_ir_whose_weights_lie_beside_it(tmp_path: Path) -> None:
    from builder.model.artifact import resolve_artifact
    from builder.server.config import sources_runtime

    for version, files in ((1, ("model.xml", "model.bin")), (2, ("graph.xml",)), (3, ("a.xml", "a.bin", "notes.xml"))):
        (tmp_path / str(version)).mkdir()
        for name in files:
            (tmp_path / str(version) / name).write_text("")
    assert sorted(version_folders(tmp_path)) == [1, 3]  # 2's graph has no weights: no model
    assert resolve_artifact(tmp_path / "3").model_path == tmp_path / "3" / "a.xml"
    assert sources_runtime([ModelSource("m", tmp_path)]) == "openvino"
    (tmp_path / "3" / "m.tflite").write_bytes(b"")  # a .tflite beside the IR: LiteRT, as before
    assert sources_runtime([ModelSource("m", tmp_path)]) == "litert"
    assert resolve_artifact(tmp_path / "3").model_path == tmp_path / "3" / "m.tflite"
    (tmp_path / "4").mkdir()
    for name in ("x.xml", "x.bin", "y.xml", "y.bin"):
        (tmp_path / "4" / name).write_text("")
    with pytest.raises(InputError, match=r"cannot tell which model to serve \(found: x.xml, y.xml\)"):
        resolve_artifact(tmp_path / "4")
