"""The benchmark suite of issue 6: `pgqw bench` (or `python -m bench.run`).

Every figure is measured against the raw SKIP LOCKED ceiling of the same run (bench.raw), so a
shared, drifting machine still gives comparable ratios. See docs/benchmarks.md for the results and
bench/run.py for the command and its options.
"""
