"""Benchmarks: the Mooncake.jl inter-framework suite (:mod:`benchmarks.suite`), the harness
comparing mooncake_py with autograd, PyTorch and JAX (``python -m benchmarks``, see
:mod:`benchmarks.run`), and the per-op tape overhead (``python -m benchmarks.overhead``)."""
