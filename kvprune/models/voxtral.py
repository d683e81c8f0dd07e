"""Voxtral (Mini-3B, Small-24B): Whisper encoder, projector, Llama decoder.

Its processor loads audio from the message itself and pads it to 30 s chunks stacked on the
batch axis; clips are handed over as base64 WAV of the already resampled waveform.
"""

from .base import ModelFamily, register_family
from .prompting import user_turn, wav_base64


def build_inputs(processor, waves, prompt):
    conversation = user_turn(0, prompt, {})
    conversation[0]["content"][:0] = [{"type": "audio", "base64": wav_base64(w)} for w in waves]
    return processor.apply_chat_template(conversation, tokenize=True, return_dict=True, return_tensors="pt")


VOXTRAL = register_family(
    ModelFamily(
        name="voxtral",
        display_name="Voxtral",
        entry_paths={"VoxtralForConditionalGeneration": ""},
        decoder_paths=("model.language_model",),
        audio_token_attrs=("audio_token_id",),
        llm_tokens_per_second=12.5,
        model_types={"voxtral": "VoxtralForConditionalGeneration"},
        build_inputs=build_inputs,
        notes="A bare VoxtralConfig has audio_token_id=None; real checkpoints and the processor say 24.",
    )
)
