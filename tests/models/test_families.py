"""A family is one declaration: the bench presets, the test models and the audio arithmetic all come
from it, and what its AudioFormat promises is what its model's encoder does."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from kvprune.harness.bench.presets import PRESETS
from kvprune.harness.bench.shapes import shapes_of
from kvprune.models import QWEN2_5_OMNI, VOXTRAL, Loading, ModelFamily, Prompting, Structure, Tiny, list_families
from tests.support.helpers import model
from tests.support.paths import REPO
from tests.support.tiny_models import AUDIO, FAMILIES

FAMILY_NAMES = list(FAMILIES)  # the families the installed transformers has
TEST_OVERRIDES = {"initializer_range", "text_config.initializer_range"}  # what tiny_models.config_for_tests sets


def _differences(a: dict, b: dict, prefix: str = "") -> set[str]:
    """Dotted keys whose values differ between two config dicts."""
    out = set()
    for key in a.keys() | b.keys():
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            out |= _differences(a[key], b[key], f"{prefix}{key}.")
        elif a.get(key) != b.get(key):
            out.add(prefix + key)
    return out


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_tiny_preset_and_test_model_come_from_the_family_tiny_config(name):
    family = FAMILIES[name].family
    preset = PRESETS.get(shapes_of(family).tiny_preset)
    assert preset.family is family and preset.config == family.tiny_config
    differences = _differences(preset.config().to_dict(), FAMILIES[name].config.to_dict())
    assert differences and differences <= TEST_OVERRIDES, differences


def test_tiny_config_overrides_update_sub_configs_and_leave_the_family_alone():
    config = QWEN2_5_OMNI.tiny_config(text_config=dict(num_hidden_layers=2), audio_token_index=7)
    assert (config.text_config.num_hidden_layers, config.audio_token_index) == (2, 7)
    assert config.text_config.hidden_size == QWEN2_5_OMNI.tiny.kwargs["text_config"]["hidden_size"]
    again = QWEN2_5_OMNI.tiny_config()
    assert (again.text_config.num_hidden_layers, again.audio_token_index) == (4, 100)


@pytest.mark.parametrize("preset_name", list(PRESETS))
def test_every_shape_gives_its_familys_token_rate(preset_name):
    """Two minutes is a whole number of chunks for every config here, real and tiny."""
    preset = PRESETS.get(preset_name)
    config, audio = preset.config(), preset.family.prompting.audio_format
    tokens = audio.tokens(config, audio.frames(config, 120.0))
    if audio.fixed_tokens(config) is not None:  # Gemma-3n: every clip the same, 30 s at most
        assert tokens == audio.fixed_tokens(config)
        assert preset.name.startswith("tiny") or tokens == preset.family.prompting.tokens_per_clip
    else:
        assert tokens == 120 * preset.family.prompting.llm_tokens_per_second


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("seconds", [1.0, 1.6, 3.0])  # 1.6 s: Omni's window rule; 3 s: several 1.28 s / 0.32 s chunks
def test_format_token_count_is_what_the_tiny_encoder_gives(name, seconds):
    """The model runs on the format's features with exactly the format's placeholder count, and
    refuses one more: every family checks that its encoder filled every placeholder."""
    tiny, m = FAMILIES[name], model(name, "sdpa")
    frames = tiny.audio.frames(tiny.config, seconds)
    n = tiny.audio.tokens(tiny.config, frames)
    features = tiny.audio.features(tiny.config, [frames], torch.Generator().manual_seed(0))

    def forward(count: int):
        ids = torch.tensor([[11, 12, *tiny.audio.placeholders(tiny.config, AUDIO, count), 13]])
        with torch.no_grad():
            return m(input_ids=ids, attention_mask=torch.ones_like(ids), **features)

    assert forward(n).logits.shape[1] == len(tiny.audio.placeholders(tiny.config, AUDIO, n)) + 3
    with pytest.raises((ValueError, RuntimeError)):
        forward(n + 1)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_frames_for_gives_a_clip_of_exactly_the_asked_tokens(name):
    tiny = FAMILIES[name]
    # the shortest audio's count: a format that pads audio to whole chunks (Voxtral) gives multiples of it
    step = max(1, tiny.audio.tokens(tiny.config, 1))
    fixed = tiny.audio.fixed_tokens(tiny.config)  # Gemma-3n: every clip has the same count
    for n in [fixed] if fixed else range(step, 70, step):
        assert tiny.audio.tokens(tiny.config, tiny.audio.frames_for(tiny.config, n)) == n


def test_voxtral_refuses_a_clip_between_whole_chunks():
    with pytest.raises(ValueError, match="cannot make a clip of 6 audio tokens.*nearest clips give 4 or 8"):
        VOXTRAL.prompting.audio_format.frames_for(FAMILIES["voxtral"].config, 6)


def _readme_family_rows() -> list[str]:
    """The rows of the README's families table."""
    lines = (REPO / "README.md").read_text().splitlines()
    header = next(n for n, line in enumerate(lines) if line.startswith("| family | classes | decoder layers |"))
    return list(itertools.takewhile(lambda line: line.startswith("| "), lines[header + 2:]))  # past the header's rule


def _family_of_row(row: str) -> ModelFamily | None:
    """The family whose display name the row's first cell is (sizes in brackets may follow)."""
    cell = row.split("|")[1].strip()
    return next((f for f in list_families() if cell == f.display_name or cell.startswith(f"{f.display_name} (")), None)


def test_every_readme_row_shows_what_its_family_declares():
    """Every family's listing is complete, and each row of the README's families table shows its family's
    declaration. A family without a row (one just added) is listed by ``kvprune families`` all the same."""
    for family in list_families():
        listing = family.listing()
        assert list(listing) == ["family", "classes", "decoder layers", "audio tokens", "long audio", "longest clip", "transformers"]
        assert all(listing.values()), listing
    rows = _readme_family_rows()
    families = [_family_of_row(row) for row in rows]
    assert rows and None not in families, [row for row, family in zip(rows, families) if family is None]
    assert len({family.name for family in families}) == len(families), "a family has two rows"
    for row, family in zip(rows, families):
        listing = family.listing()
        assert f"`{listing['decoder layers']}`" in row and listing["audio tokens"] in row, row
        assert all(f"`{name}`" in row for name in family.architectures), row
        assert row.rstrip(" |").endswith(family.loading.min_transformers), row


def test_a_declaration_gets_its_entry_and_model_types_from_its_classes():
    """``model_class`` is an entry of its own, wrappers add theirs, and each class transformers has is
    loadable under its config's model_type; a declared ``model_types`` is kept as written."""
    plain = dict(display_name="X", prompting=Prompting(VOXTRAL.prompting.audio_format, 1.0), tiny=Tiny({}))
    wrappers = Structure(entry_paths={"Qwen2_5OmniForConditionalGeneration": "thinker", "NotInTransformers": "inner"})
    family = ModelFamily(name="x", model_class="Qwen2_5OmniThinkerForConditionalGeneration", structure=wrappers, **plain)
    assert family.structure.entry_paths == {"Qwen2_5OmniThinkerForConditionalGeneration": "",
                                            "Qwen2_5OmniForConditionalGeneration": "thinker", "NotInTransformers": "inner"}
    assert family.loading.model_types == {"qwen2_5_omni_thinker": "Qwen2_5OmniThinkerForConditionalGeneration",
                                          "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration"}
    copy = dataclasses.replace(family, notes="n")  # declares again what the first declaration filled in
    assert (copy.structure, copy.loading) == (family.structure, family.loading)
    declared = ModelFamily(name="y", model_class=type("Local", (), {}), loading=Loading(model_types={"y": ""}), **plain)
    assert declared.structure.entry_paths == {"Local": ""} and declared.loading.model_types == {"y": ""}
