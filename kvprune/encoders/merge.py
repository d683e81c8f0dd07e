"""The audio merge of Voxtral, Granite Speech and Audio Flamingo 3 without a wait for the audio encoder.

Their models merge the encoder's output into the prompt's embeddings at the audio placeholders
(``get_placeholder_mask``), and first check that the placeholders and the encoder's frames agree in number
by indexing the embeddings with the placeholder mask: a host read (the index's size) that, queued behind the
audio encoder, waits for it to finish. From there the host launches every decoder layer while the GPU waits
for each, and a pruned prefill's later layers are short enough for those launches to set their time.

Here the same check is made on the host: the placeholders are counted when the model's forward starts
(before the encoder is queued, so the read waits for nothing of it), the frames are a shape. The mask
returned is the stock one, so the merge and everything after it are unchanged, and a count that differs
raises the stock error. Without ``input_ids`` (a prompt given as embeddings) the stock method runs.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn

from .overrides import acquire

#: classes whose ``get_placeholder_mask(input_ids, inputs_embeds, audio_features)`` checks the count with a
#: host read after the encoder (transformers 5.x), called from their own forward
MODEL_CLASSES = ("VoxtralModel", "GraniteSpeechModel", "AudioFlamingo3Model")
CHANGE = ("audio merge: the placeholder count checked against the encoder's frames on the host, counted before "
          "the encoder is queued (stock indexes the embeddings with the mask: a host read that waits for the encoder)")
_SIGNATURE = ["input_ids", "inputs_embeds", "audio_features"]


def fits(model: nn.Module) -> bool:
    """Whether ``model``'s merge is the one this replaces (another transformers version may differ: left stock)."""
    method = getattr(type(model), "get_placeholder_mask", None)
    return method is not None and list(inspect.signature(method).parameters)[1:] == _SIGNATURE


class HostCheckedMask:
    """``get_placeholder_mask`` with the count checked on the host. ``count`` is set by the forward's pre-hook
    when a call brings audio features and ``input_ids``, and taken by the mask of that call (None otherwise:
    decoding steps, which bring no features, leave it untouched and never read the device)."""

    def __init__(self, model: nn.Module):
        self.stock = model.get_placeholder_mask
        self.token = model.config.audio_token_id
        self.count: int | None = None
        self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs) -> None:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        features = kwargs.get("input_features", args[1] if len(args) > 1 else None)
        if input_ids is not None and features is not None:
            self.count = int((input_ids == self.token).sum())

    def __call__(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor, audio_features: torch.Tensor):
        count, self.count = self.count, None
        if input_ids is None or count is None:
            return self.stock(input_ids, inputs_embeds, audio_features)
        if count * inputs_embeds.shape[-1] != audio_features.numel():
            raise ValueError(f"Audio features and audio tokens do not match, tokens: {count}, "
                             f"features: {audio_features.shape[0]}")
        mask = input_ids == self.token
        return mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)

    def close(self) -> None:
        self._hook.remove()


def install(model: nn.Module, compile: bool | None = None) -> list:
    """Replace ``model``'s placeholder mask by ``HostCheckedMask`` (``compile`` is the other paths' argument)."""
    return [acquire(model, "get_placeholder_mask", HostCheckedMask)]
