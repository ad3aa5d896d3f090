"""Calls a serving image's smoke test makes over gRPC and the Open Inference Protocol, with the host's own
small dependencies: grpcio plus tfsmith's wire formats (`builder.wire`) (no tensorflow-serving-api, which needs all of
TensorFlow) and the standard library's HTTP client (no tritonclient). Each returns the outputs as arrays,
so the caller compares them with what the model should answer; failures raise `ProtocolCheckError` with
one line saying which call failed and why.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping

import numpy as np

from builder.errors import TfsmithError
from builder.wire.v2_binary import infer_outputs, infer_request


class ProtocolCheckError(TfsmithError):
    """A protocol call of the smoke test failed (the image answers wrongly or not at all)."""


def check_grpc(host: str, port: int, model_name: str, version: int | None,
               inputs: Mapping[str, np.ndarray], timeout_s: float = 30.0) -> dict[str, np.ndarray]:
    """TF Serving's `PredictionService/Predict` with `tensor_content` inputs; the outputs by name.

    Also asks `ModelService/GetModelStatus` first: the version must be AVAILABLE."""
    import grpc

    import builder.wire.tfs_proto as pb
    from builder.wire.tensors import fill_proto, to_array

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        status_call = channel.unary_unary(f"/{pb.MODEL_SERVICE}/GetModelStatus",
                                          request_serializer=pb.GetModelStatusRequest.SerializeToString,
                                          response_deserializer=pb.GetModelStatusResponse.FromString)
        predict_call = channel.unary_unary(f"/{pb.PREDICTION_SERVICE}/Predict",
                                           request_serializer=pb.PredictRequest.SerializeToString,
                                           response_deserializer=pb.PredictResponse.FromString)
        status_request = pb.GetModelStatusRequest()
        status_request.model_spec.name = model_name
        request = pb.PredictRequest()
        request.model_spec.name = model_name
        if version is not None:
            status_request.model_spec.version.value = version
            request.model_spec.version.value = version
        for name, value in inputs.items():
            fill_proto(request.inputs[name], np.asarray(value), content=True)
        try:
            status = status_call(status_request, timeout=timeout_s)
            states = [s.state for s in status.model_version_status]
            if pb.MODEL_STATES["AVAILABLE"] not in states:
                raise ProtocolCheckError(f"gRPC GetModelStatus {host}:{port}: {model_name} is not AVAILABLE "
                                         f"(states {states})")
            answer = predict_call(request, timeout=timeout_s)
        except grpc.RpcError as error:
            raise ProtocolCheckError(f"gRPC {host}:{port} {model_name}: {error.code().name}: "
                                     f"{error.details()}") from None
    return {name: to_array(tensor, name) for name, tensor in answer.outputs.items()}


def check_v2(base_url: str, model_name: str, inputs: Mapping[str, np.ndarray],
             timeout_s: float = 30.0) -> dict[str, np.ndarray]:
    """Open Inference Protocol: `/v2/health/ready`, then `/v2/models/<m>/infer` with the binary tensor data
    extension both ways; the outputs by name."""
    base = base_url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=timeout_s) as ready:
            if ready.status != 200:
                raise ProtocolCheckError(f"{base}/v2/health/ready answered {ready.status}")
    except (urllib.error.URLError, OSError) as error:
        raise ProtocolCheckError(f"{base}/v2/health/ready: {error}") from None
    body, headers = infer_request(inputs)
    request = urllib.request.Request(f"{base}/v2/models/{model_name}/infer", data=body, method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            raw = answer.read()
            length = answer.headers.get("Inference-Header-Content-Length")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace").strip()
        raise ProtocolCheckError(f"v2 infer {model_name}: HTTP {error.code}: "
                                 f"{text.splitlines()[0] if text else 'no body'}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ProtocolCheckError(f"v2 infer {model_name}: {error}") from None
    return infer_outputs(raw, length)
