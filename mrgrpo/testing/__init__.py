"""Offline builders for tests, examples and GPU smoke runs (no hub access)."""
