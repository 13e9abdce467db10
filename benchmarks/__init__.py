"""Benchmark scripts: run each as `.venv/bin/python -m benchmarks.<name>`."""
