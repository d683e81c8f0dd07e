"""What every family's tiny config shares: one small vocabulary layout and decoder shape.

Tiny configs (``ModelFamily.tiny_config``) build random models of each family that run in
milliseconds on a CPU: the test suite's models, the harness's tiny speed presets, and the starting
point of the demo model's config. Their special ids sit above the ordinary text ids so that random
text never contains a placeholder.
"""

AUDIO_TOKEN, AUDIO_START, AUDIO_END = 100, 101, 102
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START = 103, 104, 105
#: placeholder and marker ids: a random model must not generate them (some families re-merge audio when they see one)
SPECIAL_IDS = (AUDIO_TOKEN, AUDIO_START, AUDIO_END, IMAGE_TOKEN, VIDEO_TOKEN, VISION_START)
TEXT_IDS = (10, 90)  # ordinary text tokens, clear of pad/bos/eos and the special ids
MELS = 16

TEXT = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
#: the tiny decoder as a Qwen2 text config (Qwen2-Audio, Audio Flamingo 3)
QWEN2_TEXT = dict(model_type="qwen2", **TEXT)
#: a one-layer Whisper-style encoder (Qwen2.5-Omni, Qwen2-Audio, Aero-1)
WHISPER = dict(num_mel_bins=MELS, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32, d_model=32)
