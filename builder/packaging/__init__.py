"""Serving images, built and proven on the host: plan, context, build, smoke test.

Host-side only; the server these images run is `builder.server`, copied into each image on its own.
Modules: `plan` (ServePlan, pure, and rendering the build context), `workflow` (`tfsmith package`, said step
by step), `runtime_choice` (which runtime serves, measured here for `auto`), `smoke` (run the image and check
its answers), `tfserving` and `warmup` (TensorFlow Serving's own layout and warm-up records).
"""
