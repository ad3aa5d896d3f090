"""The bench room: runtimes side by side on this host, measured fairly in one run.

Modules: stats (pure statistics), results (plain data), models (artifacts from one source), runtimes (one
adapter per runtime), harness (the interleaved run), recommend (the pick and the LiteRT/OpenVINO A/B),
report (table, JSON, Markdown, chart), profile (TensorFlow Profiler), images (the same bench in two images),
inner (the minimal bench that runs inside an image). Nothing heavy is imported at package import.
"""
