"""Conditioning diagnostics of backbones (``make conditioning``): ``run`` (the entry point)."""
