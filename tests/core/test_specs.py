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


def test_a_method_that_sets_its_own_ratio_runs_once_at_it():
    assert parse_method("fastv").own_ratios == ()
    assert parse_method("frame+knorm:ratio=0.3").own_ratios == (), "frame takes the sweep's ratios"
    assert parse_method("knorm:ratio=0.3").own_ratios == (0.3,)
    assert parse_method("frame:ratio=0.3+knorm:ratio=0.3").own_ratios == (0.3,)
    with pytest.raises(MethodSpecError, match="sets ratios 0.3, 0.5 in its presses"):
        parse_method("frame:ratio=0.5+knorm:ratio=0.3")


@pytest.mark.parametrize("value,message", [
    ("fastv,h2o", "unknown press 'h2o'; available: fastv, random, frame, dart, knorm, random_kv, tova, snapkv"),
    ("dart:pivots=3", "method 'dart:pivots=3': press 'dart' has no parameter 'pivots'; its parameters: ratio, layer, "
                      "keep_rule, scope, pivot_audio, pivot_text, budget"),
    ("fastv:layer=abc", "method 'fastv:layer=abc': fastv.layer='abc' is not a valid int."),
    ("pyramidkv:press=pyramidkv", "PyramidKVPress(press=PyramidKVPress(...)) wraps a budget policy, which takes another "
                                  "press's scores; choose a press that scores: knorm, random_kv, tova, snapkv, streaming_llm, "
                                  "expected_attention."),
    ("adakv:press=adakv", "AdaKVPress(press=AdaKVPress(...)) wraps a budget policy"),
    ("pyramidkv:press=adakv(safeguard=0.5)", "PyramidKVPress(press=AdaKVPress(...)) wraps a budget policy"),
    ("adakv:press=fastv", "AdaKVPress(press=...) takes a configured cache press that scores (knorm, random_kv, tova, "
                          "snapkv, streaming_llm, expected_attention), not FastVPress."),
    ("pyramidkv:scorer=tova", "press 'pyramidkv' has no parameter 'scorer' (it is now 'press': pyramidkv:press=tova)"),
    ("adakv:press=snapkv(ratio=0.3)", "AdaKVPress sets ratio for the press it wraps: give ratio=0.3 to AdaKVPress, not to its "
                                      "SnapKVPress."),
    ("pyramidkv:window=16,press=snapkv(window=8)", "PyramidKVPress(window=16) and its SnapKVPress(window=8) disagree"),
    ("pyramidkv:press=snapkv(kernel=4)", "pyramidkv.press=snapkv(kernel=4): kernel=4 is invalid"),
    ("pyramidkv:press=snapkv(pivots=3)", "press 'snapkv' has no parameter 'pivots'"),
    ("pyramidkv:press=snapkv(window=8", "its parentheses do not pair up"),
    ("pyramidkv:press=3", "pyramidkv.press='3' is not a press"),
    ("knorm:press=snapkv", "press 'knorm' has no parameter 'press'"),
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


def test_a_wrapped_press_is_written_as_a_call_and_reads_back():
    from kvprune import AdaKVPress, PyramidKVPress, SnapKVPress, TOVAPress

    method = parse_method("pyramidkv:press=snapkv(kernel=7,window=32),beta=4")
    assert method.label == "pyramidkv:press=snapkv(window=32,kernel=7),beta=4", "the inner press's parameters in field order"
    assert parse_method(method.label) == method
    assert method.build(0.5) == PyramidKVPress(ratio=0.5, beta=4, press=SnapKVPress(window=32, kernel=7))
    # parameters continue after the call; in YAML, a wrapped press is written as text
    assert parse_methods("adakv:press=tova,safeguard=0.5,frame") == [parse_method("adakv:safeguard=0.5,press=tova"), parse_method("frame")]
    assert parse_methods(yaml.safe_load("methods: ['pyramidkv:press=snapkv(window=32,kernel=7),beta=4']")["methods"]) == [method]
    assert parse_method("adakv:press=tova").build(0.3) == AdaKVPress(ratio=0.3, press=TOVAPress())
    # its default, written or not, is the same method
    assert parse_method("pyramidkv:press=snapkv").label == parse_method("pyramidkv:press=snapkv()").label == "pyramidkv"
    assert parse_method("pyramidkv:press=snapkv(window=64)").label == "pyramidkv"


def test_a_wrapper_sets_ratio_layer_and_keep_rule_and_shares_scope_and_window_with_its_press():
    from kvprune import PyramidKVPress, SnapKVPress, TOVAPress

    press = PyramidKVPress(ratio=0.4, layer=2, keep_rule="floor", press=SnapKVPress(window=32, kernel=7))
    assert press.window == 32 and press.scoring_press == SnapKVPress(ratio=0.4, layer=2, keep_rule="floor", window=32, kernel=7)
    on_wrapper = PyramidKVPress(window=32, scope="prompt", press=SnapKVPress(kernel=7))
    on_press = PyramidKVPress(press=SnapKVPress(window=32, scope="prompt", kernel=7))
    assert on_wrapper == on_press and repr(on_wrapper) == repr(on_press), "one method, however it is written"
    assert on_wrapper.scope == on_wrapper.scoring_press.scope == "prompt"
    import dataclasses

    assert dataclasses.replace(press, ratio=0.7).scoring_press.ratio == 0.7, "a sweep's ratio reaches the inner press"
    # the inner press's parameters are part of the identity: two inner presses never share results
    assert repr(PyramidKVPress(press=SnapKVPress(kernel=7))) != repr(PyramidKVPress(press=SnapKVPress(kernel=5)))
    assert repr(PyramidKVPress(press=SnapKVPress())) != repr(PyramidKVPress(press=TOVAPress()))
    with pytest.raises(TypeError, match=re.escape("PyramidKVPress(press='tova') names a press: give the press itself")):
        PyramidKVPress(press="tova")
    with pytest.raises(TypeError, match="not the class SnapKVPress"):
        PyramidKVPress(press=SnapKVPress)
