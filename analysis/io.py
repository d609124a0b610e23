"""Deprecated alias: :mod:`rlvr_plumbing.io` (moved to the plumbing layer; docs/architecture.md)."""

from rlvr_plumbing import moved

__getattr__ = moved(__name__, "rlvr_plumbing.io")
