"""Benchmarks of speed and memory (``make bench`` = ``python -m bench``); see ``__main__.py``."""
