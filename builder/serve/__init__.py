"""Serving: a TensorFlow-Serving-compatible REST server for .tflite models, and the images that carry it.

Modules, one idea each: `protocol` (TF Serving's JSON in and out, pure), `backends` (LiteRT and OpenVINO
behind one small interface), `batching` (dynamic batching), `app` (the ASGI app), `tfserving` (TF Serving's
on-disk layout and warmup records), `package` (ServePlan and image builds), `smoke` (prove an image answers).
Nothing here is imported by the core CLI until a serve command runs.
"""
