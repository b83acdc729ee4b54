"""Workload controllers as the system under test: their world, what they promise, and workloads for them."""
