"""The HTTP control plane: the only package that imports FastAPI."""
