"""The benchmark suite: `pgqw bench` from a checkout (the lab is not installed).

Every figure is measured against the raw SKIP LOCKED ceiling of the same run (bench.raw), so a
shared, drifting machine still gives comparable ratios. See docs/benchmarks.md for the results and
bench/run.py for the command and its options.
"""
