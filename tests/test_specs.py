"""Method specs: text and YAML forms, canonical labels, value conversion, building presses, errors."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import yaml

from kvprune import ComposedPress, DARTPress, FramePress, KNormPress, RandomPress, TokenDropPress, register_press
from kvprune.press import PRESSES
from kvprune.specs import MethodSpecError, parse_method, parse_methods


@dataclass(frozen=True)
class TypedPress(TokenDropPress):
    """A press with a field of every type a spec can set."""

    scale: float = 1.0
    steps: int = 3
    flag: bool = False
    mode: str = "plain"


@pytest.fixture
def typed():
    register_press("typed", TypedPress)
    yield
    PRESSES.unregister("typed")


def labels(value) -> list[str]:
    return [method.label for method in parse_methods(value)]


def test_text_form_with_parameters_continued_after_commas_and_composition():
    text = "fastv,dart:budget=reference,pivot_audio=2,frame+knorm:ratio=0.3"
    assert labels(text) == ["fastv", "dart:pivot_audio=2,budget=reference", "frame+knorm:ratio=0.3"]
    dart = parse_methods(text)[1].build(0.5)
    assert dart == DARTPress(ratio=0.5, pivot_audio=2, budget="reference")


def test_yaml_form_gives_the_same_methods_as_the_text_form():
    written = yaml.safe_load(
        """
        methods:
          - fastv
          - {press: dart, budget: reference, pivot_audio: 2}
          - compose: [frame, {press: knorm, ratio: 0.3}]
          - random:seed=4+knorm
        """
    )["methods"]
    assert parse_methods(written) == parse_methods("fastv,dart:budget=reference,pivot_audio=2,frame+knorm:ratio=0.3,random:seed=4+knorm")


def test_label_shows_only_what_differs_from_the_defaults_in_field_order():
    assert parse_method("dart:budget=equal").label == "dart" and parse_method("dart:budget=equal") == parse_method("dart")
    assert parse_method("dart:budget=reference,pivot_text=4,pivot_audio=1").label == "dart:pivot_audio=1,budget=reference"
    # ratio and layer pin what a sweep varies: they are shown whenever given, even at their default
    assert parse_method("knorm:layer=1,ratio=0.0").label == "knorm:ratio=0.0,layer=1"
    for method in parse_methods("fastv,dart:budget=reference,pivot_audio=2,frame+knorm:ratio=0.3,random:seed=7"):
        assert parse_method(method.label) == method, "a label reads back as the same method"


def test_values_are_converted_by_the_field_type(typed):
    text = parse_method("typed:scale=2,steps=5,flag=true,mode=fast").build(0.1)
    from_yaml = parse_method({"press": "typed", "scale": 2, "steps": 5, "flag": True, "mode": "fast"}).build(0.1)
    assert text == from_yaml == TypedPress(ratio=0.1, scale=2.0, steps=5, flag=True, mode="fast")
    assert type(text.scale) is float
    assert parse_method("typed:flag=false,scale=1.5").label == "typed:scale=1.5"
    assert parse_method("typed:flag=yes").label == "typed:flag=true"


@pytest.mark.parametrize("value,message", [
    ("typed:steps=2.5", "method 'typed:steps=2.5': typed.steps='2.5' is not a valid int"),
    ("typed:flag=maybe", "method 'typed:flag=maybe': typed.flag='maybe' is not a valid bool"),
    ({"press": "typed", "steps": True}, "method 'typed:steps=True': typed.steps=True is not a valid int"),
    ({"press": "typed", "mode": 3}, "method 'typed:mode=3': typed.mode=3 is not a valid str"),
])
def test_a_value_of_the_wrong_type_names_the_method_and_the_field(typed, value, message):
    with pytest.raises(MethodSpecError, match=re.escape(message)):
        parse_method(value)


def test_build_gives_the_ratio_and_layer_to_parts_without_their_own():
    method = parse_method("frame+knorm:ratio=0.3")
    assert method.build(0.5) == ComposedPress([FramePress(ratio=0.5), KNormPress(ratio=0.3)])
    assert [p.layer for p in method.build(0.5).parts()] == [2, 1]  # each press's own default
    assert [p.layer for p in method.build(0.5, layer=3).parts()] == [3, 3]
    assert parse_method("random:layer=1,seed=2").build(0.4, layer=3) == RandomPress(ratio=0.4, layer=1, seed=2)
    assert method.build(0.5).layer == 1 and method.kind == "composed"
    assert parse_method("knorm").kind == "cache" and parse_method("frame").kind == "token"


@pytest.mark.parametrize("value,message", [
    ("fastv,h2o", "unknown press 'h2o'; available: fastv, random, frame, dart, knorm, random_kv, tova, snapkv"),
    ("dart:pivots=3", "method 'dart:pivots=3': press 'dart' has no parameter 'pivots'; its parameters: ratio, layer, "
                      "keep_rule, pivot_audio, pivot_text, budget"),
    ("fastv:layer=abc", "method 'fastv:layer=abc': fastv.layer='abc' is not a valid int."),
    ("pyramidkv:scorer=pyramidkv", "scorer='pyramidkv' is a budget policy, which takes another press's scores; choose a "
                                   "press that scores: knorm, random_kv, tova, snapkv, streaming_llm, expected_attention."),
    ("adakv:scorer=adakv", "scorer='adakv' is a budget policy"),
    ("pyramidkv:scorer=adakv", "scorer='adakv' is a budget policy"),
    ("adakv:scorer=fastv", "scorer='fastv' is not a cache press; choose a press that scores: knorm,"),
    ("dart:budget=most", "method 'dart:budget=most': budget='most' is invalid"),
    ("fastv+dart", "at most one token-dropping press"),
    ("budget=reference,dart", "parameter 'budget=reference' comes before any press"),
    ("dart:budget", "'budget' is not key=value"),
    ("frame+", "a press name is missing"),
    ("knorm:ratio=1.5", "ratio=1.5 is invalid"),
    ("dart:budget=reference,budget=equal", "dart sets budget twice"),
    ({"compose": ["frame"], "ratio": 0.3}, "compose takes a list of presses and nothing beside it"),
    ({"budget": "reference"}, "names no press"),
])
def test_bad_specs_say_what_is_wrong(value, message):
    with pytest.raises(MethodSpecError, match=re.escape(message)):
        parse_methods(value)


def test_parse_method_wants_exactly_one():
    with pytest.raises(MethodSpecError, match="holds 2 methods where one is expected"):
        parse_method("fastv,frame")
