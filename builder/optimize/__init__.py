"""Make a trained model smaller and faster for the machine it will run on, without changing its API, and prove
what was gained and lost.

`tfsmith optimize MODEL --data DATA --out DIR` prunes (tfmot), quantizes (TFLite converter, QAT), exports and
evaluates every artifact with the runtime that will serve it. Heavy libraries (TensorFlow, tf_keras, tfmot,
LiteRT) are imported only inside the modules that need them; `recipe`, `quality` and `data` are pure.

tfmot works only with Keras 2, so every module here imports TensorFlow through `builder.optimize.tfenv`, which
sets `TF_USE_LEGACY_KERAS=1` first (the variable is read once, at TensorFlow's first import).

MODEL is a Keras 2 (tf_keras) or Keras 3 `.keras`/`.h5` file, a SavedModel (from Keras or a plain `tf.Module`),
or a `.tflite`. Its serving signature is the contract (`builder.report.ModelContract`): input and output names,
dtypes (float32/16, int32/int64 ids, bool, string) and shapes (dynamic batch, dynamic sequence lengths), plus a
task per output. Every artifact keeps that signature — int8 files included (float inputs and outputs, int8
inside; id inputs stay integer). `--signature NAME` makes another SavedModel signature the contract (a
`tf.Module` with only `predict`): the .tflite files keep that key and it is the served default
(`chosen_signature`). `--import MODULE` (repeatable) imports the user's modules first, so custom layers and
objects registered with `@keras.saving.register_keras_serializable` load; the exported SavedModel carries the
graph, so serving needs no user code.

Runtimes (one word each, everywhere; `builder.model.registry`): `litert` (a .tflite on LiteRT/XNNPACK), `openvino`
and `openvino-bf16` (OpenVINO reading the .tflite or its own IR, at f32 (int8 where the file is) or bf16),
`tensorflow` and `tensorflow-bf16` (a SavedModel signature; or a Select-TF-ops .tflite on TensorFlow's own
`tf.lite.Interpreter`, which needs a TensorFlow build with the Flex delegate: the stock 2.21 wheel has none, so
such a file is kept but marked "not run on this host"). No runtime changes the file it runs: an int8 model is a
file written here and judged by the gate (the int8 .tflite, OpenVINO's NNCF int8 IR), never one quantized when
a server starts.

When the TFLite builtins cannot express the model (a Keras 3 GRU's tensor lists; `TextVectorization`'s string
ops), optimize still completes: no plain .tflite, no pruning or QAT (they only feed .tflite files), the
SavedModel served on `tensorflow`, a Select-TF-ops .tflite tried, and one note with the converter's own first
error line. Every library error (converter, Keras, TensorFlow) is one line keeping that library's first error
line whole; its whole text goes to `OUT/logs/<step>.log` (or, when the run stops and --out must stay untouched, to
a temp folder the message names).

The layout of `--out` (read by `tfsmith serve`/`package` and `tfsmith bench`; written atomically: a staging
folder, then one rename)::

    OUT/
      saved_model/            serving-only SavedModel of the optimized (e.g. pruned) float model; its
                              `serving_default` is the contract: keyword inputs, outputs named as the original
      model_fp32.tflite       TFLite float32                        (format `tflite_fp32`)
      model_dynamic.tflite    dynamic-range int8 weights            (format `tflite_dynamic`)
      model_float16.tflite    float16 weights                       (format `tflite_float16`)
      model_int8.tflite       full int8 inside, float I/O           (format `tflite_int8`)
      model_qat_int8.tflite   quantization-aware-trained int8       (format `tflite_qat_int8`)
      openvino_fp32.xml/.bin  OpenVINO's IR of the SavedModel, float32 weights (format `openvino_ir_fp32`):
                              OpenVINO's converter on the contract's signature, ports named as the original
                              names them, the signature recorded in the IR (no TensorFlow needed to read it)
      openvino_int8.xml/.bin  the same quantized to int8 by NNCF on the calibration rows, here and now
                              (format `openvino_ir_int8`; where the recipe quantizes to int8). Not written, with
                              a note saying why, for a model with several signatures (one IR holds one
                              function), or where OpenVINO is missing or its converter refuses the model
      model.tflite            the original, when MODEL is a .tflite (format `tflite_original`; nothing else)
      model_select_tf.tflite  float, TFLite builtins + Select TF ops, written only when the plain conversion
                              fails; runs on TensorFlow's interpreter with the Flex delegate (format
                              `tflite_select_tf`, runtime `tensorflow`)
      logs/<step>.log         the whole text of every library error met on the way (convert-fp32.log, ...)
      samples.npz             `x/<input>`: the first 32 held-out inputs in the original dtypes;
                              `expected/<output>`: the ORIGINAL model's outputs on them;
                              `y/<output>`: their labels, for outputs DATA labels. Named keys always.
                              Strings (contract dtype `string`) are fixed-width UTF-8 bytes, numpy `S<n>`
                              (np.savez cannot store object arrays and np.load(allow_pickle=False) cannot read
                              them): `tf.constant(a)` takes it as tf.string as is, `a.astype(object)` gives
                              Python bytes, `np.char.decode(a, "utf-8")` str; for JSON send each as a string
                              (or {"b64": ...} when not UTF-8). Numpy strips trailing NUL bytes of `S` items.
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
     "chosen": "model_int8.tflite" (relative to OUT; "saved_model" on GPU targets, or when it measured fastest,
               or when no plain .tflite could be made),
     "chosen_runtime": a runtime of builder.model.registry ("litert", "openvino", "openvino-bf16", "tensorflow", ...),
     "chosen_signature": the signature a request without signature_name gets: the contract's
               ("serving_default", or --signature's), or "serving_xla" when the SavedModel's XLA-compiled
               signature was measured faster beyond noise than the contract's,
     "samples": "samples.npz",
     "gate": {"max_accuracy_drop", "max_relative_error", "judged_against": "original", "passed",
              "chosen_reason"},
     "selection": {"measured": bool, "how": str,
                   "candidates": [{"artifact", "runtime", "p50_us"|null, "samples", "size_bytes", "error",
                                   "signature"}]},
     "capacity": {"artifact", "runtime", "signature", "threads": 1, "p50_us", "ci_low_us", "ci_high_us", "cores",
                  "per_core_per_s", "host_ceiling_per_s"} | null   (the choice at one thread; null: not measured)}

    One candidate row per artifact x runtime x signature: a .tflite's `signature` is its own (the contract's);
    the SavedModel has a row for the contract's signature and, when it carries one, a row for `serving_xla`
    (same artifact "saved_model", runtime "tensorflow"). A row with an `error` is never chosen: it says why (a
    runtime that cannot load the file, one that fails the gate on its own numbers, a serving_xla not faster
    beyond noise than the contract's signature, which is then not judged); `p50_us` is kept whenever it was timed.

    ArtifactResult = {"path", "format", "runtime", "size_bytes", "gzip_bytes", "threads",
                      "latency_us": {"p50", "p99", "runs"}, "throughput": {"batch", "batch_p50_us", "samples_per_s", "settled"},
                      "inputs": [...], "outputs": [...]   (the file's own signature),
                      "metrics": [OutputMetric, ...], "contract_kept": bool, "accepted": bool, "reason": str,
                      "variables_bytes": int, "extra": {"signatures": [...] (a SavedModel's: the contract's,
                                                         "serving_xla", ...), "runnable_here": false (a file this
                                                         host's runtime could not run: not evaluated, rejected)}}
    OutputMetric = {"output", "task", "metric": "accuracy_drop"|"disagreement"|"relative_error",
                    "value", "limit", "passed", "why", "accuracy", "original_accuracy", "agreement",
                    "mae", "rmse", "original_mae", "relative_error", "max_abs_error"}

    An artifact's `format` is its file's, as named in the layout above (tflite_int8, saved_model, ...); reports
    written by earlier tfsmith versions call it `kind`, and `builder.report` still reads that.

Quality (`builder.optimize.quality`): every artifact, per output, against the ORIGINAL model (before any
pruning), on DATA's held-out rows (never calibration rows) and one all-zero input after them. Classification
with labels: accuracy drop within `--max-accuracy-drop` (top-1 agreement reported beside it); classification
without labels: disagreement with the original within the same limit (a row whose top score is tied has no
answer: a disagreement); when the original answers one class for nearly every row, or varies less than the
artifact's error, a passing agreement vouches for nothing and the output is judged like a regression one, with
the report saying so; regression: relative error RMS(y - y_orig) / std(y_orig) (the error against the spread
of the original's outputs, not their size) within `--max-relative-error` (MAE/RMSE against labels reported
when given). An artifact is accepted when every output
passes and its signature equals the contract; rejected ones are kept and marked; when the chosen one is
rejected the command exits 3 (bad input exits 2 with one line and leaves --out untouched).

Choice: on this host with `--recipe auto`, every accepted artifact x runtime x signature (a .tflite on LiteRT;
OpenVINO reading the same file, and its own IR, at f32 and bf16 when `openvino` is importable; the SavedModel's
contract signature and its `serving_xla` on TensorFlow; a Select-TF-ops .tflite on TensorFlow's interpreter;
runtimes and signatures that compute differently are checked against the gate too) is
timed in one interleaved loop (`builder.measure`, the one bench and `--runtime auto` use) on the model's own
held-out rows; the fastest p50 wins unless others are within noise of it (their median's 95% confidence
interval overlaps its own): then the smaller file wins, then the smaller runtime (the registry's tie order:
litert, openvino, openvino-bf16, tensorflow, ...), then the contract's signature over serving_xla, then the name.
The chosen artifact x runtime is then timed at batch 1 on one thread: report.json `capacity` and a `serving:`
note say what one core answers a second (1e6 / p50, model time only) and this host's usable cores at most, a
ceiling, not a promise. For another target, a GPU target (the SavedModel on `tensorflow`) or a recipe file,
the choice is by rule and `selection.how` says so.
"""
