"""Benchmarks of mesh-provisioner, run on demand: `python -m bench` (see docs/performance.md)."""
