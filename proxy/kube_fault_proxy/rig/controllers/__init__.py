"""Workload controllers as the system under test: their history, what they promise, and workloads for them."""
