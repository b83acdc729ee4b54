"""Randomized fault search: generate profiles, run fast trials, confirm hits, shrink them."""
