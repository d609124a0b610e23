"""Deprecated alias: :mod:`analysis.diff.lora` (the checkpoint diff is a package; docs/architecture.md)."""

from rlvr_plumbing import moved

__getattr__ = moved(__name__, "analysis.diff.lora")
