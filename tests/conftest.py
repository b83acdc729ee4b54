"""Shared by every test directory: pytest's own pytester, for the plugin tests."""

pytest_plugins = ["pytester"]
