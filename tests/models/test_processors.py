"""Each family's real processor (built offline, see ``tiny_processors``) gives a clip exactly as many
placeholders as the encoder of a tiny model that agrees with it gives embeddings (the model refuses
any other count), and as many as the family's own audio arithmetic says, for clips shorter and
longer than one 30 s chunk."""

from __future__ import annotations

import pytest
import torch

from tests.support.tiny_models import FAMILIES
from tests.support.tiny_processors import processor_and_config, wave

SECONDS = [1.0, 29.0, 31.0, 95.0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            processor, config = processor_and_config(name, tmp_path_factory.mktemp(name))
            family = FAMILIES[name].family
            torch.manual_seed(0)
            cache[name] = processor, config, family.build(config).eval()
        return cache[name]

    return get


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("seconds", SECONDS)
def test_processor_placeholders_equal_encoder_embeddings_and_the_family_arithmetic(built, name, seconds):
    processor, config, model = built(name)
    family = FAMILIES[name].family
    inputs = family.prompting.build_inputs(processor, [wave(seconds)], "What is heard ?")
    inputs = {key: value for key, value in inputs.items() if isinstance(value, torch.Tensor)}
    placeholders = int((inputs["input_ids"] == family.audio_token_id(model)).sum())
    audio = family.prompting.audio_format
    assert placeholders == audio.tokens(config, audio.frames(config, seconds))
    with torch.no_grad():  # the model checks that its encoder filled every placeholder, no more, no less
        logits = model(**inputs).logits
    assert logits.shape[1] == inputs["input_ids"].shape[1]
