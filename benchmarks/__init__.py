"""Epochal's benchmarks: `python -m benchmarks run NAME`, `python -m benchmarks report`."""
