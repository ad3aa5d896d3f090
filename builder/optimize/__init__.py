"""Make a trained model smaller and faster for the machine it will run on, without changing its API, and prove
what was gained and lost.

`tfsmith optimize MODEL --data DATA --out DIR` prunes (tfmot), quantizes (TFLite converter, QAT), exports and
evaluates every artifact with the runtime that will serve it. Heavy libraries (TensorFlow, tf_keras, tfmot,
LiteRT) are imported only inside the modules that need them; `recipe`, `quality` and `data` are pure.

tfmot works only with Keras 2, so every module here imports TensorFlow through `builder.optimize.tfenv`, which
sets `TF_USE_LEGACY_KERAS=1` first (the variable is read once, at TensorFlow's first import).

MODEL is a Keras 2 (tf_keras) or Keras 3 `.keras`/`.h5` file, a SavedModel (from Keras or a plain `tf.Module`),
or a `.tflite`. Its serving signature is the contract (`builder.report.ModelContract`): input and output names,
dtypes (float32/16, int32/int64 ids, bool) and shapes (dynamic batch), plus a task per output. Every artifact
keeps that signature — int8 files included (float inputs and outputs, int8 inside; id inputs stay integer).

The layout of `--out` (read by `tfsmith serve`/`package` and `tfsmith bench`; written atomically: a staging
folder, then one rename)::

    OUT/
      saved_model/            serving-only SavedModel of the optimized (e.g. pruned) float model; its
                              `serving_default` is the contract: keyword inputs, outputs named as the original
      model_fp32.tflite       TFLite float32                        (kind `tflite_fp32`)
      model_dynamic.tflite    dynamic-range int8 weights            (kind `tflite_dynamic`)
      model_float16.tflite    float16 weights                       (kind `tflite_float16`)
      model_int8.tflite       full int8 inside, float I/O           (kind `tflite_int8`)
      model_qat_int8.tflite   quantization-aware-trained int8       (kind `tflite_qat_int8`)
      model.tflite            the original, when MODEL is a .tflite (kind `tflite_original`; nothing else)
      samples.npz             `x/<input>`: the first 32 held-out inputs in the original dtypes;
                              `expected/<output>`: the ORIGINAL model's outputs on them;
                              `y/<output>`: their labels, for outputs DATA labels. Named keys always.
      report.json             `builder.report.Report`, below
      report.md               the same for humans
      report.png              size vs latency plot

Only the .tflite files the recipe asks for are written. report.json (schema 2; `builder.report` reads and
writes it, standard library only)::

    {"schema": 2, "tfsmith": str, "created": ISO-8601,
     "model": {"source", "format": "keras2"|"keras3"|"saved_model"|"tflite", "keras_version", "params",
               "contract": {"signature": "serving_default",
                            "inputs":  [{"name", "dtype", "shape": [null|int, ...]}, ...],
                            "outputs": [{"name", "dtype", "shape", "task": "classification"|"regression",
                                         "task_why": str}, ...]}},
     "data": {"source", "train_rows", "calibration_rows", "calibration_from": "x_calib"|"x_train"|"none",
              "held_out_rows", "labels": [output names with held-out labels]},
     "recipe": {...Recipe...}, "reasons": [str], "notes": [str],
     "target": {"name", "arch", "is_host", "gpu_capabilities", "features"},
     "host": {"cpu_features", "threads", "tensorflow", "litert", "openvino"},
     "baseline": ArtifactResult of the original float model as a SavedModel (null for a .tflite original),
     "sparsity": {"target", "achieved", "layers", "schedule", "structured"} | null,
     "artifacts": [ArtifactResult, ...],
     "chosen": "model_int8.tflite" (relative to OUT; "saved_model" on GPU targets),
     "chosen_runtime": "litert"|"openvino"|"openvino-nncf"|"tensorflow",
     "samples": "samples.npz",
     "gate": {"max_accuracy_drop", "max_relative_error", "judged_against": "original", "passed",
              "chosen_reason"},
     "selection": {"measured": bool, "how": str,
                   "candidates": [{"artifact", "runtime", "p50_us"|null, "samples", "size_bytes", "error"}]}}

    ArtifactResult = {"path", "kind", "runtime", "size_bytes", "gzip_bytes", "threads",
                      "latency_us": {"p50", "p99", "runs"}, "throughput": {"batch", "samples_per_s"},
                      "inputs": [...], "outputs": [...]   (the file's own signature),
                      "metrics": [OutputMetric, ...], "contract_kept": bool, "accepted": bool, "reason": str,
                      "variables_bytes": int, "extra": {"signatures": [...]}}
    OutputMetric = {"output", "task", "metric": "accuracy_drop"|"disagreement"|"relative_error",
                    "value", "limit", "passed", "why", "accuracy", "original_accuracy", "agreement",
                    "mae", "rmse", "original_mae", "relative_error", "max_abs_error"}

Quality (`builder.optimize.quality`): every artifact, per output, against the ORIGINAL model (before any
pruning), on DATA's held-out rows (never calibration rows). Classification with labels: accuracy drop within
`--max-accuracy-drop` (top-1 agreement reported beside it); classification without labels: disagreement with the
original within the same limit; regression: relative error ||y - y_orig|| / ||y_orig|| within
`--max-relative-error` (MAE/RMSE against labels reported when given). An artifact is accepted when every output
passes and its signature equals the contract; rejected ones are kept and marked; when the chosen one is
rejected the command exits 3 (bad input exits 2 with one line and leaves --out untouched).

Choice: on this host with `--recipe auto`, every accepted .tflite x runtime (LiteRT; OpenVINO reading the same
file when `openvino` is importable, and OpenVINO quantizing the fp32 file with NNCF at load when `nncf` is;
checked against the gate too) is timed with bench's interleaved loop on the
model's own held-out rows; the fastest p50 wins, a smaller file within 15% of it wins the tie. For another
target, a GPU target or a recipe file, the choice is by rule and `selection.how` says so.
"""
