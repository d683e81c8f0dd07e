"""The one registry mechanism: registration, lookup errors, order, entry points; and the press
registry holding the installed press classes, each imported once."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import kvprune.models
import kvprune.presses.fastv
from kvprune import FramePress, get_press, register_press
from kvprune.models import FAMILIES, QWEN2_AUDIO
from kvprune.registry import Registry


def test_register_as_decorator_or_call_and_read_back_in_order():
    registry = Registry("widget")

    @registry.register("b")
    def make_b():
        return "b"

    registry.register("a", {"an": "object"})
    registry.register("c", FramePress)
    assert registry.names() == ["b", "a", "c"] and list(registry) == ["b", "a", "c"] and len(registry) == 3
    assert registry.get("b") is make_b and registry.get("a") == {"an": "object"} and "c" in registry
    assert registry.items()[0] == ("b", make_b)
    with pytest.raises(ValueError, match="unknown widget 'd'; available: b, a, c"):
        registry.get("d")
    assert registry.unregister("a") == {"an": "object"} and registry.names() == ["b", "c"]


def test_a_name_is_taken_once():
    registry = Registry("widget")
    registry.register("one", FramePress)
    registry.register("one", FramePress)  # the same entry again: nothing changes
    with pytest.raises(ValueError, match="widget 'one' is already registered .*FramePress.*register .*dict under another name"):
        registry.register("one", dict)

    def first():
        return 1

    def redefined():  # a notebook cell run again defines the function anew under the same name
        return 2

    redefined.__qualname__ = first.__qualname__
    registry.register("f", first)
    assert registry.register("f", redefined) is redefined and registry.get("f") is redefined


def test_check_refuses_entries():
    with pytest.raises(TypeError, match="press 'dict' must be a subclass of TokenDropPress or CachePress"):
        register_press("dict", dict)
    with pytest.raises(ValueError, match=r"press name 'a\+b' is invalid"):
        register_press("a+b", FramePress)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package installed the way pip installs one: a module and a dist-info with entry points."""
    (tmp_path / "widget_plugin.py").write_text("LOADED = True\nWIDGET = {'made by': 'a plugin'}\n")
    dist = tmp_path / "widget_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: widget-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [kvprune.test_widgets]
        plugged = widget_plugin:WIDGET
        broken = widget_plugin:MISSING
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("widget_plugin", None)


def test_entry_points_are_loaded_lazily_and_a_broken_one_is_skipped(plugin):
    registry = Registry("widget", entry_point_group="kvprune.test_widgets")
    registry.register("built_in", "first")
    assert "widget_plugin" not in sys.modules, "nothing is loaded before the registry is read"
    with pytest.warns(UserWarning, match="widget 'broken' from entry point 'widget_plugin:MISSING'.*is skipped"):
        names = registry.names()
    assert names == ["built_in", "plugged"]
    assert registry.get("plugged") == {"made by": "a plugin"}


def test_press_registry_holds_the_installed_classes_imported_once():
    assert isinstance(get_press("fastv"), kvprune.presses.fastv.FastVPress)
    # the repository root is on sys.path under pytest: nothing may import a second copy from there
    assert "presses" not in sys.modules and "harness" not in sys.modules


def test_model_families_are_a_registry():
    """Every family module of kvprune/models registers its family under the module's own name."""
    assert FAMILIES.get("qwen2_audio") is QWEN2_AUDIO
    folder = Path(kvprune.models.__file__).parent
    declaring = [path.stem for path in folder.glob("*.py") if path.stem != "base" and "register_family(" in path.read_text()]
    assert sorted(FAMILIES.names()) == sorted(declaring) and len(declaring) >= 9
    for name in declaring:
        assert FAMILIES.get(name) in vars(importlib.import_module(f"kvprune.models.{name}")).values()
