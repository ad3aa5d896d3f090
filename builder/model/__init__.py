"""The one model layer: what a model artifact is (`artifact`, `signature`), every runtime that can run it
(`registry`, defined once) and the backends that do (`backend`, `openvino`, `tensorflow`, made by `create`).

Carried by serving images and used by optimize, bench, packaging and the server alike, so what optimize
measured is exactly what a server runs.
"""
