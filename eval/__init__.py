"""Frozen-feature evaluators. They import only skipless.models and skipless.data, never training code."""
