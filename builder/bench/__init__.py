"""`tfsmith bench`: runtimes side by side on this host, measured fairly in one run, for the user's model.

Modules: results (plain data), models (artifacts from one source, through optimize's converter), runtimes (one
adapter per runtime, and which serving runtime each row stands for), harness (the interleaved run), recommend
(the pick), report (table, JSON, Markdown, chart), profile (TensorFlow Profiler), images (the same bench in two
images), served_images (the user's SavedModel served from two TensorFlow images), inner (the minimal bench that
runs inside an image), quiet (native libraries' output to a log). Statistics, the timing loop and the decision
are `builder.measure`'s, shared with optimize. Nothing heavy is imported at package import.
"""
