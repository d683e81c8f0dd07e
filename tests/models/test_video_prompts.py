"""Video with its sound track, images and audio in one prompt, on the Omni families' tiny models with
their real processor classes (images and frames through ``vision_frames``, no torchvision): every
contiguous run of audio placeholders between video chunks belongs to its sound track, each clip
keeps its own count, kept tokens keep their TMRoPE positions, every press runs (ratio 0 changes
nothing), decoding on the pruned cache equals a recompute, and a padded batch equals its rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support import cache_reference as ref
from tests.support.helpers import GREEDY, K, FixedPress, cache_of, decoder_layers
from kvprune import get_press, list_presses
from kvprune.engine.clips import clips_of, placeholder_kinds
from kvprune.models import tiny
from kvprune.models.prompting import Image, Prompt, Video
from kvprune.keep_rules import keep_count
from tests.support.tiny_models import FAMILIES, PAD
from tests.support.tiny_processors import processor_and_config, wave

OMNI = [name for name in ("qwen2_5_omni", "qwen3_omni") if name in FAMILIES]
SCOPES = ["audio", "video", "audio+video"]
TOKEN_PRESSES = list_presses(kind="token")
SCOPE_CLIPS = {"audio": ("clip", "track"), "video": ("video", "image"), "audio+video": ("clip", "track", "video", "image")}


def frames(count: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((count, 40, 60, 3)) * 255).astype(np.uint8)


def prompt_inputs(processor, family, seconds: float, n_frames: int, seed: int, image: bool = True) -> dict:
    """A clip, an image, then a video of ``n_frames`` at 2 fps with its sound track, then text."""
    image_part = (Image(frames(1, seed + 5)[0]),) if image else ()
    prompt = Prompt(("Audio 1 :", 0, *image_part, Video(frames(n_frames, seed), 2.0, audio=1), "What is heard ?"))
    return family.prompting.build_inputs(processor, [wave(1.0, seed), wave(seconds, seed + 1)], prompt)


@pytest.fixture(scope="module", params=OMNI)
def omni(request, tmp_path_factory):
    """(family name, model, processor, the inputs of one prompt): a 4 s video, its 4 s sound track."""
    name = request.param
    processor, _ = processor_and_config(name, tmp_path_factory.mktemp(name))
    family = FAMILIES[name].family
    model = FAMILIES[name].build("sdpa")
    return name, model, processor, prompt_inputs(processor, family, 4.0, 8, seed=0)


def media_positions(ids: list[int]) -> dict[str, list[int]]:
    """The prompt's media read off its markers, independently of kvprune: the standalone clip
    (audio between audio markers), the sound track (audio inside the video's vision markers), the
    video and the image placeholders."""
    out = {"clip": [], "track": [], "video": [], "image": []}
    in_vision = False
    for position, token in enumerate(ids):
        if token == tiny.VISION_START:
            in_vision = True
        elif token == 106:  # <|vision_eos|>
            in_vision = False
        elif token == tiny.AUDIO_TOKEN:
            out["track" if in_vision else "clip"].append(position)
        elif token == tiny.VIDEO_TOKEN:
            out["video"].append(position)
        elif token == tiny.IMAGE_TOKEN:
            out["image"].append(position)
    return out


def runs(positions: list[int]) -> int:
    return 1 + sum(b != a + 1 for a, b in zip(positions, positions[1:]))


def test_the_sound_track_between_video_chunks_is_one_clip(omni):
    name, model, processor, inputs = omni
    ids = inputs["input_ids"]
    media = media_positions(ids[0].tolist())
    assert runs(media["track"]) > 1 and runs(media["video"]) > 1, "the video and its sound track interleave"
    kinds = placeholder_kinds(ids, FAMILIES[name].family.placeholder_ids(model))
    (clips,) = clips_of(kinds, lambda n: keep_count(n, 0.5), modalities=("audio", "video", "image"))
    found = {clip.modality: [] for clip in clips}
    for clip in clips:
        found[clip.modality].append(clip.positions().tolist())
    assert found["audio"] == [media["clip"], media["track"]]
    assert found["video"] == [media["video"]] and found["image"] == [media["image"]]
    assert [clip.n_keep for clip in clips if clip.modality == "audio"] == [
        keep_count(len(media["clip"]), 0.5), keep_count(len(media["track"]), 0.5)  # per track, not per chunk
    ]
    assert [clip.index for clip in clips] == list(range(len(clips)))


@pytest.mark.parametrize("press_name", list_presses())
def test_ratio_zero_is_bit_identical(omni, press_name):
    name, model, processor, inputs = omni
    with torch.no_grad():
        logits = model(**inputs).logits
        tokens = model.generate(**inputs, max_new_tokens=3, **GREEDY)
        with get_press(press_name, scope="audio+video")(model, ratio=0.0):
            pressed_logits = model(**inputs).logits
            pressed_tokens = model.generate(**inputs, max_new_tokens=3, **GREEDY)
    assert torch.equal(pressed_logits, logits) and torch.equal(pressed_tokens, tokens)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("press_name", TOKEN_PRESSES)
def test_token_presses_keep_each_clip_its_count(omni, press_name, scope):
    name, model, processor, inputs = omni
    media = media_positions(inputs["input_ids"][0].tolist())
    clips = [media[kind] for kind in SCOPE_CLIPS[scope]]
    with torch.no_grad(), get_press(press_name, layer=K, scope=scope)(model, ratio=0.6) as outcome:
        model(**inputs)
    (kept,) = outcome.kept_positions
    assert [int(np.isin(kept, clip).sum()) for clip in clips] == [keep_count(len(clip), 0.6) for clip in clips]
    assert len(kept) == sum(keep_count(len(clip), 0.6) for clip in clips), "only the scope's placeholders are pruned"
    assert outcome.stats[0].audio_tokens == sum(len(clip) for clip in clips)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("press_name", ["knorm", "snapkv", "streaming_llm", "expected_attention"])
def test_cache_presses_keep_each_clip_its_count(omni, press_name, scope):
    name, model, processor, inputs = omni
    media = media_positions(inputs["input_ids"][0].tolist())
    clips = [media[kind] for kind in SCOPE_CLIPS[scope]]
    with torch.no_grad(), get_press(press_name, window=4, scope=scope)(model, ratio=0.6) as outcome:
        cache = cache_of(model(**inputs, use_cache=True))
    with torch.no_grad():
        full = cache_of(model(**inputs, use_cache=True))
    valid = torch.ones_like(inputs["input_ids"], dtype=torch.bool)
    for j in outcome.layer_stats:
        (heads,) = ref.cached_positions(cache.layers[j].keys, full.layers[j].keys, valid)
        for held in heads:
            assert [len(held & set(clip)) for clip in clips] == [keep_count(len(clip), 0.6) for clip in clips], f"layer {j}"
            others = set(range(inputs["input_ids"].shape[1])) - {q for clip in clips for q in clip}
            assert others <= held, "nothing outside the scope is evicted"


@pytest.mark.parametrize("scope", ["audio", "audio+video"])
def test_kept_tokens_keep_their_time_positions(omni, scope):
    """Layers >= K see the kept tokens' own rotary embeddings: their TMRoPE (time, height, width) ids."""
    name, model, processor, inputs = omni
    layer = decoder_layers(model)[K]
    seen = []
    hook = layer.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["position_embeddings"]), with_kwargs=True)
    try:
        with torch.no_grad():
            model(**inputs)
            with get_press("fastv", layer=K, scope=scope)(model, ratio=0.7) as outcome:
                layer_hook = layer.register_forward_pre_hook(  # after the engine's: sees what it gathered
                    lambda m, args, kwargs: seen.append(kwargs["position_embeddings"]), with_kwargs=True)
                model(**inputs)
                layer_hook.remove()
    finally:
        hook.remove()
    (full_cos, full_sin), _, (cos, sin) = seen
    slots = outcome.logit_positions[0]
    assert len(slots) < inputs["input_ids"].shape[1]
    assert torch.equal(cos[0], full_cos[0, slots]) and torch.equal(sin[0], full_sin[0, slots])


@pytest.mark.parametrize("scope", ["audio", "audio+video"])
@pytest.mark.parametrize("press_name", TOKEN_PRESSES)
def test_cached_decoding_equals_recompute(omni, press_name, scope):
    name, model, processor, inputs = omni
    with torch.no_grad(), get_press(press_name, layer=K, scope=scope)(model, ratio=0.5) as outcome:
        out = model.generate(**inputs, max_new_tokens=3, output_logits=True, return_dict_in_generate=True, **GREEDY)
    width = inputs["input_ids"].shape[1]
    fixed = FixedPress(ratio=0.5, layer=K, scope=scope, positions=outcome.kept_positions)
    for step, step_logits in enumerate(out.logits):
        ids = out.sequences[:, : width + step]
        with torch.no_grad(), fixed(model):
            logits = model(**dict(inputs, input_ids=ids, attention_mask=torch.ones_like(ids)), use_cache=False).logits[:, -1]
        torch.testing.assert_close(logits, step_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("press_name", ["knorm", "snapkv"])
def test_cache_press_decoding_equals_recompute(omni, press_name):
    name, model, processor, inputs = omni
    with torch.no_grad(), get_press(press_name, window=4, scope="audio+video")(model, ratio=0.6):
        out = model.generate(**inputs, max_new_tokens=3, output_logits=True, return_dict_in_generate=True, **GREEDY)
    with torch.no_grad():
        full = cache_of(model(**inputs, use_cache=True))
    width = inputs["input_ids"].shape[1]
    valid = torch.ones_like(inputs["input_ids"], dtype=torch.bool)
    cache = cache_of(out)
    kept = {j: ref.cached_positions(cache.layers[j].keys[:, :, :-2], full.layers[j].keys, valid)[0]  # less the new tokens
            for j in range(1, len(cache.layers))}
    for step, step_logits in enumerate(out.logits):
        recomputed = ref.recompute_with_eviction(model, "sdpa", inputs, out.sequences[:, : width + step], kept, width)
        torch.testing.assert_close(recomputed, step_logits, rtol=1e-4, atol=1e-4)


def batch_of(rows: list[dict]) -> dict:
    """Prompts built one by one, as the processor would batch them: left padding, features padded
    to the longest, visual inputs concatenated in row order."""
    width = max(row["input_ids"].shape[1] for row in rows)
    frames_width = max(row["input_features"].shape[-1] for row in rows)
    batch = {}
    for key in rows[0]:
        values = [row[key] for row in rows if key in row]
        if key in ("input_ids", "attention_mask"):
            fill = PAD if key == "input_ids" else 0
            batch[key] = torch.cat([torch.nn.functional.pad(v, (width - v.shape[1], 0), value=fill) for v in values])
        elif key in ("input_features", "feature_attention_mask"):
            batch[key] = torch.cat([torch.nn.functional.pad(v, (0, frames_width - v.shape[-1])) for v in values])
        elif isinstance(values[0], torch.Tensor):
            batch[key] = torch.cat(values)
        else:
            batch[key] = values[0]
    return batch


@pytest.mark.parametrize("press_name", [*TOKEN_PRESSES, "snapkv"])
def test_padded_batch_equals_one_row_at_a_time(omni, press_name):
    name, model, processor, inputs = omni
    family = FAMILIES[name].family
    rows = [inputs, prompt_inputs(processor, family, 2.6, 6, seed=3, image=False)]
    press = get_press(press_name, scope="audio+video", **({"window": 4} if press_name == "snapkv" else {"layer": K}))
    batch = batch_of(rows)
    assert batch["attention_mask"][1].sum() < batch["attention_mask"][0].sum(), "the second row is padded"
    with torch.no_grad(), press(model, ratio=0.5) as outcome:
        together = model.generate(**batch, max_new_tokens=3, **GREEDY)
    kept_together, width = outcome.kept_positions, batch["input_ids"].shape[1]
    for b, row in enumerate(rows):
        with torch.no_grad(), press(model, ratio=0.5) as outcome:
            alone = model.generate(**row, max_new_tokens=3, **GREEDY)
        assert torch.equal(alone[0, row["input_ids"].shape[1]:], together[b, width:])
        assert torch.equal(outcome.kept_positions[0], kept_together[b])


def test_qwen3_omni_refuses_to_drop_tokens_before_its_deepstack_layers(tmp_path):
    if "qwen3_omni" not in FAMILIES:
        pytest.skip("Qwen3-Omni is not in this transformers")
    family = FAMILIES["qwen3_omni"].family
    processor, _ = processor_and_config("qwen3_omni", tmp_path)
    config = family.tiny_config(vision_config=dict(depth=2, deepstack_visual_indexes=[0, 1]))
    model = family.build(config).eval()
    inputs = prompt_inputs(processor, family, 2.0, 4, seed=1)
    with torch.no_grad():
        with pytest.raises(ValueError, match="first 2 decoder layers add visual features.*prune at layer 2"):
            with get_press("fastv", layer=1)(model, ratio=0.5):
                model(**inputs)
        with get_press("fastv", layer=2)(model, ratio=0.5) as outcome:
            model(**inputs)
    assert outcome.stats[0].kept_tokens < outcome.stats[0].audio_tokens
