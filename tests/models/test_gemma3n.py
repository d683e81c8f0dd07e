"""What is particular to Gemma-3n: layers that reuse another layer's cache, sliding windows, fixed
clips, and a model built without its timm vision tower. (Every press runs on it in the family matrix.)"""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3nConfig

from kvprune import FastVPress, FramePress, KNormPress
from kvprune.models import GEMMA3N
from tests.support.helpers import GREEDY, K, cache_of, model
from tests.support.tiny_models import FAMILIES, TinyModel

ROW = [[("text", 4), ("audio", 12), ("text", 5)]]
pytestmark = pytest.mark.skipif("gemma3n" not in FAMILIES, reason="this transformers has no Gemma-3n")


def test_sharing_layers_read_the_last_earlier_layer_of_their_type():
    config = FAMILIES["gemma3n"].config.text_config
    types = config.layer_types
    sources = GEMMA3N.structure.layer_io.kv_sources(config)
    first_shared = config.num_hidden_layers - config.num_kv_shared_layers
    assert sorted(sources) == list(range(first_shared, config.num_hidden_layers))
    for layer, source in sources.items():
        assert types[source] == types[layer] and source < first_shared
        assert all(types[j] != types[layer] for j in range(source + 1, first_shared))
    real = Gemma3nConfig().text_config  # the default config is E4B's shape
    assert GEMMA3N.structure.layer_io.kv_sources(real) == {j: 18 if types_j == "sliding_attention" else 19
                                                  for j, types_j in enumerate(real.layer_types) if j >= 20}


def test_pruning_after_a_source_layer_is_refused_and_at_it_works():
    m = model("gemma3n", "sdpa")
    sources = GEMMA3N.structure.layer_io.kv_sources(FAMILIES["gemma3n"].config.text_config)
    last_allowed = min(sources.values())
    with pytest.raises(ValueError, match=f"prune at layer {last_allowed} or earlier"):
        FastVPress(layer=last_allowed + 1)(m, ratio=0.5)
    inputs = FAMILIES["gemma3n"].inputs(ROW)
    with torch.no_grad(), FramePress(layer=last_allowed)(m, ratio=0.5) as outcome:
        m.generate(**inputs, max_new_tokens=2, **GREEDY)
    assert outcome.stats[0].kept_tokens == 6
    # cache presses are free to start later: the sharing layers follow their source's cache
    with torch.no_grad(), KNormPress(ratio=0.5, layer=last_allowed + 1)(m) as outcome:
        m.generate(**inputs, max_new_tokens=2, **GREEDY)
    assert sorted(outcome.layer_stats) == [j for j in range(last_allowed + 1, 6) if j not in sources]


def test_a_prompt_or_answer_beyond_the_sliding_window_is_refused():
    tiny = TinyModel(GEMMA3N)
    narrow = GEMMA3N.tiny_config(text_config=dict(sliding_window=30))
    torch.manual_seed(0)
    m = GEMMA3N.build(narrow).eval()
    inputs = tiny.inputs(ROW)  # 4 + 14 + 5 = 23 tokens
    with torch.no_grad():
        m.generate(**inputs, max_new_tokens=10, **GREEDY)  # unpruned: no limit
        with FastVPress(layer=K)(m, ratio=0.5):
            out = m.generate(**inputs, max_new_tokens=5, return_dict_in_generate=True, **GREEDY)
            assert out.sequences.shape[1] == 28
            with pytest.raises(ValueError, match="sliding-window layers hold 29 tokens"):
                m.generate(**inputs, max_new_tokens=10, **GREEDY)
            long = tiny.inputs([[("text", 20), ("audio", 12), ("text", 5)]])
            with pytest.raises(ValueError, match="reach 39"):
                m(**long)


def test_every_clip_has_the_fixed_count_and_short_audio_is_padded():
    tiny = FAMILIES["gemma3n"]
    config, audio = tiny.config, tiny.audio
    assert [audio.tokens(config, audio.frames(config, s)) for s in (0.1, 1.0, 30.0, 95.0)] == [12] * 4
    real = Gemma3nConfig()
    assert audio.frames(real, 95.0) == 3000 and audio.tokens(real, 3000) == GEMMA3N.prompting.tokens_per_clip == 188
    with pytest.raises(ValueError, match="every Gemma-3n clip has 12 audio tokens"):
        audio.frames_for(config, 8)


def test_built_without_the_vision_tower_which_audio_never_calls():
    m = model("gemma3n", "sdpa")
    assert not any(True for _ in m.model.vision_tower.parameters())
    with torch.no_grad():
        cache = cache_of(m(**FAMILIES["gemma3n"].inputs(ROW), use_cache=True))
    assert cache is not None
    with pytest.raises(NotImplementedError, match="without its vision tower"):
        m.model.vision_tower(torch.zeros(1, 3, 8, 8))
