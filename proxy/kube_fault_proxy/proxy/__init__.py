"""The proxy half: request identity, profiles, engine and faults, runtime, profile sources, mitm glue, control API."""
