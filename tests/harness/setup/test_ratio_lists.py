"""Ratio lists as users write them (ranges, steps, lists), and the errors that say how to write them."""

from __future__ import annotations

import pytest

from kvprune.harness.setup.ratio_lists import parse_ratios


@pytest.mark.parametrize(
    "text,expected",
    [("0.1..0.9", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]), ("0.1..0.9:0.2", [0.1, 0.3, 0.5, 0.7, 0.9]),
     ("0.9..0.1", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]), ("0.7..0.3:0.2", [0.3, 0.5, 0.7]),
     ("0,0.5,0.9", [0.0, 0.5, 0.9]), ("0.5", [0.5]), (["0.1..0.2", 0.7], [0.1, 0.2, 0.7])],
)
def test_ratio_specifications(text, expected):
    assert parse_ratios(text) == expected


@pytest.mark.parametrize("text,message", [("0.5..1.0", "ratio=1.0"), ("fast", "cannot read ratios"), (",", "name no ratio: write a range"), ("0..0.5:0", "cannot read")])
def test_bad_ratio_specifications_say_how_to_write_them(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ratios(text)
