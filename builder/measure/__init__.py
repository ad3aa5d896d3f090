"""How tfsmith times things and decides which is faster: ONE place, used by `tfsmith bench`, `tfsmith optimize`'s
choice between candidates and `--runtime auto` (serve, package).

- `stats`: the median, its distribution-free confidence interval, spread and the stable/noisy verdicts;
- `loop`: the interleaved timing loop (every runner visited each round, in a rotated order), which asks a
  policy after every round who stops;
- `race`: those policies, pure: optimize's race between candidates (one slower than the best beyond noise
  stops; the rest once the choice is settled), and each figure on its own once it is known (rows/s, capacity);
- `decide`: the one rule for "faster beyond noise" (the medians' confidence intervals do not overlap) and the
  one way ties break (smaller file, then a fixed runtime order, then the name), so identical runs choose alike;
- `threads`: the one thread set-up for TensorFlow (and the count every runtime is given).

It imports nothing from bench, optimize, packaging or the server: they all stand on it.
"""
