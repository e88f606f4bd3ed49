"""The embedded default configuration and its example models."""
