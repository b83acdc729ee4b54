"""Kubernetes access both halves use: lightkube clients and an informer."""
