"""What every model of the proxy is built from, below profiles, faults and requests: the strict base model and
unit-carrying value types (strict.py) and glob patterns (globs.py)."""
