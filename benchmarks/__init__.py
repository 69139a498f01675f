"""Helpers of scripts/benchmark.py: the contenders it compares and the worker that times one."""
