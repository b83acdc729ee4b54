"""Scenario runs: the scenario format, the runner, its journal timeline, reports and their comparison."""
