"""Developer benchmarks (not shipped in the wheel): run from the repository, e.g.
``python -m benchmarks.bench_pool``. Their latest results are in ``benchmarks/results/``."""
