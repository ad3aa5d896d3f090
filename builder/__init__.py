"""tfsmith: TensorFlow built for the hardware you have, and models made small and fast for it."""

__version__ = "0.1.0"
