"""`tfsmith bench`: runtimes side by side on this host, measured fairly in one run, for the user's model.

Modules: stats (pure statistics), results (plain data), models (artifacts from one source, through optimize's
converter), runtimes (one adapter per runtime), harness (the interleaved run), recommend (the pick, the one
timing loop and decision that optimize and the server reuse), report (table, JSON, Markdown, chart), profile
(TensorFlow Profiler), images (the same bench in two images), inner (the minimal bench that runs inside an
image). Nothing heavy is imported at package import.
"""
