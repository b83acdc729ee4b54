"""Invariants and what they are judged on: the catalogue, pod placement, safety, pod waits, a run's history."""
