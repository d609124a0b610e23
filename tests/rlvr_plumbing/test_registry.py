"""The one generic registry (rlvr_plumbing.registry.Registry): registration, collisions, lookups
that list the names, unregistering and the test context manager."""

from __future__ import annotations

import pytest

from rlvr_plumbing.registry import Registry


def _shapes(**kw) -> Registry:
    reg = Registry("shape", **kw)

    @reg.register
    class Square:
        name = "square"

    @reg.register
    class Circle:
        name = "circle"

    return reg


def test_register_get_names_and_mapping():
    reg = _shapes()
    assert reg.names() == ["square", "circle"]                      # registration order
    assert _shapes(sort=True).names() == ["circle", "square"]
    assert reg.get("square").__name__ == "Square"
    assert "circle" in reg and "triangle" not in reg and len(reg) == 2
    assert list(reg) == ["square", "circle"]
    d = reg.as_dict()
    d.pop("square")                                                  # a copy
    assert "square" in reg
    assert repr(reg) == "Registry('shape', 2 entries)"


def test_register_under_another_name_and_with_a_key():
    reg = Registry("figure", key=lambda spec: spec["id"])
    spec = {"id": "fig1"}
    assert reg.register(spec) is spec
    reg.register(name="alias")(spec)
    assert reg.get("alias") is spec and reg.names() == ["fig1", "alias"]


def test_collisions_raise_and_the_same_object_again_is_a_no_op():
    reg = _shapes()
    square = reg.get("square")
    assert reg.register(square) is square and len(reg) == 2

    class Other:
        name = "square"

    with pytest.raises(ValueError, match=r"^shape 'square' is already registered$"):
        reg.register(Other)
    assert reg.get("square") is square


@pytest.mark.parametrize("bad", [None, "", 3])
def test_a_name_is_required(bad):
    class Nameless:
        name = bad

    with pytest.raises(ValueError, match=r"^a shape needs a non-empty string name, got "):
        Registry("shape").register(Nameless)


def test_unknown_names_list_the_allowed_ones_sorted():
    reg = _shapes()
    with pytest.raises(ValueError, match=r"^shape: unknown shape 'triangle'; allowed: circle, square$"):
        reg.get("triangle")
    with pytest.raises(ValueError, match=r"^NAME: unknown shape 'triangle'; allowed: circle, square$"):
        reg.get("triangle", arg="NAME")
    with pytest.raises(ValueError, match=r"^shape: unknown shape \['x'\]; allowed: circle, square$"):
        reg.get(["x"])                                               # unhashable: same message
    with pytest.raises(ValueError, match=r"^shape: unknown shape 'x'; allowed: none registered$"):
        Registry("shape").get("x")


def test_unregister():
    reg = _shapes()
    reg.unregister("square")
    assert reg.names() == ["circle"]
    with pytest.raises(ValueError, match=r"^shape: unknown shape 'square'; allowed: circle$"):
        reg.unregister("square")


def test_registered_context_manager_removes_the_entry_even_on_error():
    reg = _shapes()

    class Triangle:
        name = "triangle"

    with reg.registered(Triangle) as obj:
        assert obj is Triangle and reg.get("triangle") is Triangle
    assert "triangle" not in reg
    with pytest.raises(RuntimeError):
        with reg.registered(Triangle, name="tri"):
            assert "tri" in reg
            raise RuntimeError("boom")
    assert "tri" not in reg and reg.names() == ["square", "circle"]

    class Square2:
        name = "square"

    with pytest.raises(ValueError, match="already registered"):
        with reg.registered(Square2):
            pass  # pragma: no cover
    assert reg.get("square").__name__ == "Square"                  # the original entry survives


def test_registered_keeps_an_entry_that_was_there_before():
    reg = _shapes()
    square = reg.get("square")
    with reg.registered(square):
        pass
    assert reg.get("square") is square
