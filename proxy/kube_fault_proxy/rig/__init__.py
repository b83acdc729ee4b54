"""The rig around the proxy: local control plane, load, invariants, scenarios and reports, search, pytest plugin."""
