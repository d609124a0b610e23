"""The modules that moved to the plumbing layer keep their old import paths as deprecated aliases:
the same objects, with a DeprecationWarning naming the new module."""

from __future__ import annotations

import importlib

import pytest

MOVED = [("rlvr_theory.checks", "rlvr_plumbing.checks", "number"),
         ("rlvr_theory.registry", "rlvr_plumbing.registry", "Registry"),
         ("rlvr_theory.serialize", "rlvr_plumbing.serialize", "dumps"),
         ("rlvr_theory.runner", "rlvr_plumbing.runner", "parse_params"),
         ("analysis.io", "rlvr_plumbing.io", "atomic_dir"),
         ("analysis.runtime", "rlvr_plumbing.runtime", "resolve_device")]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_old_path_gives_the_same_object_with_a_warning(old, new, name):
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {new} \({name}\)"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_from_import_of_an_old_path_works_and_a_missing_name_is_an_attribute_error():
    with pytest.warns(DeprecationWarning):
        from rlvr_theory.checks import probability
    assert probability("p", 0.5) == 0.5
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = importlib.import_module("analysis.io").no_such_name
