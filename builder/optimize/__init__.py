"""Make a trained model smaller and faster for the machine it will run on, and prove what was gained and lost.

`tfsmith optimize MODEL --data DATA --out DIR` prunes (tfmot), quantizes (TFLite converter, QAT), exports and
evaluates every artifact with the runtime that will serve it. Heavy libraries (TensorFlow, tf_keras, tfmot,
LiteRT) are imported only inside the modules that need them; `builder.optimize.recipe` is pure.

tfmot works only with Keras 2, so every module here imports TensorFlow through `builder.optimize.tfenv`,
which sets `TF_USE_LEGACY_KERAS=1` first (FACTS §4).

The layout of `--out` (a contract for the serve and bench rooms; written atomically: temp dir, then rename)::

    OUT/
      saved_model/            serving-only SavedModel (`model.export`), float32 weights of the optimized
                              (e.g. pruned) model; signature `serving_default`, called with ONE keyword
                              argument whose name is report.json's `model.input.name`
      model_fp32.tflite       TFLite float32                      (kind `tflite_fp32`)
      model_dynamic.tflite    dynamic-range int8 weights          (kind `tflite_dynamic`)
      model_float16.tflite    float16 weights                     (kind `tflite_float16`)
      model_int8.tflite       full int8, int8 input and output    (kind `tflite_int8`; quantize inputs with
                              the artifact's `input.quantization` [scale, zero_point], dequantize outputs
                              with `output.quantization`)
      model_qat_int8.tflite   quantization-aware-trained int8     (kind `tflite_qat_int8`)
      samples.npz             held-out inputs `x` (float32, model input shape), labels `y` when DATA has
                              them, and `expected` = the float model's outputs for `x` (smoke tests)
      report.json             everything below, machine-readable
      report.md               the same as a table for humans
      report.png              size vs latency vs accuracy plot

Only the .tflite files the recipe asks for are written. report.json (schema 1)::

    {"schema": 1, "tfsmith": "0.1.0", "created": ISO-8601,
     "model": {"source": str, "format": "keras2"|"keras3"|"saved_model", "keras_version": str|null,
               "params": int, "input": {"name", "shape", "dtype"}, "output": {"name", "shape", "dtype"}},
     "data": {"source", "train_rows", "calibration_rows", "calibration_from": "x_calib"|"x_train", "labels"},
     "held_out_rows": int,
     "recipe": {...Recipe as a dict...}, "reasons": [str, ...], "notes": [str, ...],
     "target": {"name", "arch", "gpu_capabilities": [...], "features": [int8/half-relevant flags]},
     "host": {"cpu_features": [all /proc/cpuinfo flags], "threads": int, "tensorflow": str, "litert": str},
     "baseline": {<the unoptimized float model served as a SavedModel, same fields as an artifact>},
     "sparsity": {"target", "achieved", "layers": {name: fraction}, "schedule": {...}|null,
                  "structured": "2:4"|null} | null,
     "artifacts": [{"path": "model_int8.tflite" (relative to OUT), "kind": "tflite_int8",
                    "size_bytes": int, "gzip_bytes": int, "accuracy": float|null, "agreement": float,
                    "accuracy_drop": float, "latency_us": {"p50", "p99", "runs"},
                    "throughput": {"batch": int, "samples_per_s": float}, "threads": int, "runtime": str,
                    "input": {"name", "shape", "dtype", "quantization": [scale, zero_point]},  # .tflite
                    "output": {...same...}, "accepted": bool, "reason": str,
                    # saved_model only: "variables_bytes", "variables_gzip_bytes", "signatures",
                    # and with serving_xla: "xla_latency_us", "xla_agreement"
                    }, ...],
     "chosen": "model_int8.tflite" (or "saved_model" on GPU targets), "samples": "samples.npz",
     "gate": {"metric": "accuracy"|"agreement", "max_accuracy_drop": float, "chosen_drop": float,
              "passed": bool}}

`accuracy` is on DATA's held-out split (`x_val`/`y_val`), never on calibration rows (x_calib, else x_train);
`agreement` is the fraction of held-out inputs whose argmax matches the unoptimized float model's (the gate's
metric when DATA has no labels). An artifact whose drop vs the baseline exceeds `--max-accuracy-drop` is kept
but marked `"accepted": false`; when the chosen one is rejected the command exits 3 (bad input exits 2 with
one line and leaves --out untouched).

Latency: batch-1 calls, p50/p99, after warm-up, with `--threads` interpreter/op threads; int8 I/O
(de)quantization happens outside the timed call. Throughput: rows/s at batch 32.
"""
