"""The audio merge of Voxtral, Granite Speech and Audio Flamingo 3 without a wait for the audio encoder.

Their models merge the encoder's output into the prompt's embeddings at the audio placeholders, and on the way
read the device on the host where the size of a result depends on values (a boolean index: its size is known
only once the mask is read). Queued behind the audio encoder, each such read waits for it to finish; from there
the host launches every decoder layer while the GPU waits for each, and a pruned prefill's later layers are
short enough for those launches to set their time. Three of them, each replaced on the model instance:

* ``get_placeholder_mask`` (all three) checks that the placeholders and the encoder's frames agree in number by
  indexing the embeddings with the placeholder mask. ``HostCheckedMask`` counts the placeholders when the
  model's forward starts (before the encoder is queued), the frames are a shape; the mask returned is stock's,
  and a count that differs raises the stock error. Without ``input_ids`` (a prompt given as embeddings) the
  stock method runs.
* Granite Speech's ``get_merged_audio_embeddings`` keeps the encoder's valid frames by indexing them with the
  feature mask. ``GatheredFrames`` finds the mask's positions when the model's forward starts and gathers them
  (a size fixed before the encoder), then runs the stock method on the frames kept, with no mask to index by.
* Audio Flamingo 3's ``get_audio_features`` cuts each window's valid frames by indexing with a mask built from
  the output lengths. ``CutFrames`` reads the lengths before it queues the encoder and cuts with slices.

Each copies values and computes none, so the merged embeddings equal stock's bit for bit. A transformers
version whose methods take other arguments keeps its own (``fits``).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn

from .overrides import acquire

CHANGE = ("audio merge: the placeholder count checked against the encoder's frames on the host, counted before "
          "the encoder is queued (stock indexes the embeddings with the mask: a host read that waits for the encoder)")
FRAMES_CHANGE = ("; the encoder's valid frames selected by what the host read of their mask before the encoder is queued "
                 "(stock: a boolean index after it)")


class _ReadBeforeTheEncoder:
    """A replacement of one of the model's methods that reads what it needs from the model forward's arguments in
    a pre-hook, before the encoder is queued (a read there waits for nothing of it). Only a call that brings audio
    features reads (decoding steps leave the reading alone); the method's call takes the reading, once."""

    #: the forward's first arguments, alike in the three models (Voxtral's third is another)
    ARGUMENTS = ("input_ids", "input_features", "input_features_mask")

    def __init__(self, model: nn.Module, method: str):
        self.stock = getattr(model, method)
        self.reading = None
        self._hook = model.register_forward_pre_hook(self._before, with_kwargs=True)

    def _before(self, module, args, kwargs) -> None:
        input_ids, features, mask = (kwargs.get(name, args[i] if len(args) > i else None)
                                     for i, name in enumerate(self.ARGUMENTS))
        if features is not None:
            self.reading = self.read(input_ids, mask)

    def read(self, input_ids: torch.Tensor | None, mask):
        raise NotImplementedError

    def take(self):
        reading, self.reading = self.reading, None
        return reading

    def close(self) -> None:
        self._hook.remove()


class HostCheckedMask(_ReadBeforeTheEncoder):
    """``get_placeholder_mask`` with the count checked on the host: the placeholders counted before the encoder
    (None without ``input_ids``: the stock method runs)."""

    def __init__(self, model: nn.Module):
        super().__init__(model, "get_placeholder_mask")
        self.token = model.config.audio_token_id

    def read(self, input_ids, mask) -> int | None:
        return None if input_ids is None else int((input_ids == self.token).sum())

    @property
    def count(self) -> int | None:
        """The placeholders counted for the coming merge (None: none counted)."""
        return self.reading

    def __call__(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor, audio_features: torch.Tensor):
        count = self.take()
        if input_ids is None or count is None:
            return self.stock(input_ids, inputs_embeds, audio_features)
        if count * inputs_embeds.shape[-1] != audio_features.numel():
            raise ValueError(f"Audio features and audio tokens do not match, tokens: {count}, "
                             f"features: {audio_features.shape[0]}")
        mask = input_ids == self.token
        return mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)


class GatheredFrames(_ReadBeforeTheEncoder):
    """Granite Speech's ``get_merged_audio_embeddings`` with the feature mask's frames gathered at positions found
    before the encoder, then the stock method with no mask. A call with another mask, or none, takes the stock
    method."""

    def __init__(self, model: nn.Module):
        super().__init__(model, "get_merged_audio_embeddings")

    def read(self, input_ids, mask) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(the mask read, its flat positions)"""
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 2:
            return mask, mask.reshape(-1).nonzero().squeeze(1)
        return None

    def __call__(self, input_ids: torch.Tensor, audio_features: torch.Tensor,
                 input_features_mask: torch.Tensor | None = None) -> torch.Tensor:
        selection = self.take()
        if (selection is None or selection[0] is not input_features_mask
                or audio_features.shape[:-1] != input_features_mask.shape):
            return self.stock(input_ids, audio_features, input_features_mask)
        positions = selection[1].to(audio_features.device)
        kept = audio_features.reshape(-1, audio_features.shape[-1]).index_select(0, positions)
        return self.stock(input_ids, kept, None)


class CutFrames:
    """Audio Flamingo 3's ``get_audio_features`` with each window's frames cut to its output length by slices,
    the lengths read on the host before the encoder is queued (stock reads them, as a boolean index's size,
    after it). The stock steps otherwise: the encoder, the projector, the lengths by the encoder's formula."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.stock = model.get_audio_features

    def __call__(self, input_features: torch.Tensor, input_features_mask: torch.Tensor, **kwargs):
        return_dict = kwargs.pop("return_dict", None)
        if input_features_mask is None or input_features_mask.dim() != 2:
            return self.stock(input_features, input_features_mask, return_dict=return_dict, **kwargs)
        tower = self.model.audio_tower
        _, lengths = tower._get_feat_extract_output_lengths(input_features_mask.sum(-1).to(torch.long).cpu())
        output = tower(input_features, input_features_mask=input_features_mask, return_dict=True, **kwargs)
        embeds = self.model.multi_modal_projector(output.last_hidden_state)
        frames = embeds.shape[1]
        output.pooler_output = torch.cat([embeds[i, : min(max(n, 0), frames)] for i, n in enumerate(lengths.tolist())])
        return output if return_dict is not False else output.to_tuple()


#: what is replaced on each model class, as (method, replacement, the method's arguments it was written for)
REPLACEMENTS = {
    "VoxtralModel": (("get_placeholder_mask", HostCheckedMask, ["input_ids", "inputs_embeds", "audio_features"]),),
    "GraniteSpeechModel": (
        ("get_placeholder_mask", HostCheckedMask, ["input_ids", "inputs_embeds", "audio_features"]),
        ("get_merged_audio_embeddings", GatheredFrames, ["input_ids", "audio_features", "input_features_mask"]),
    ),
    "AudioFlamingo3Model": (
        ("get_placeholder_mask", HostCheckedMask, ["input_ids", "inputs_embeds", "audio_features"]),
        ("get_audio_features", CutFrames, ["input_features", "input_features_mask", "kwargs"]),
    ),
}
MODEL_CLASSES = tuple(REPLACEMENTS)


def fits(model: nn.Module) -> bool:
    """Whether ``model``'s methods are the ones this replaces (another transformers version may differ: left stock)."""

    def arguments(name: str) -> list[str] | None:
        method = getattr(type(model), name, None)
        return None if method is None else list(inspect.signature(inspect.unwrap(method)).parameters)[1:]

    return all(arguments(name) == expected for name, _, expected in REPLACEMENTS.get(type(model).__name__, ()))


def change(class_name: str) -> str:
    """What ``install`` replaces on a model of ``class_name``, in one line."""
    return CHANGE + (FRAMES_CHANGE if len(REPLACEMENTS[class_name]) > 1 else "")


def install(model: nn.Module, compile: bool | None = None) -> list:
    """Replace ``model``'s methods of ``REPLACEMENTS`` (``compile`` is the other paths' argument)."""
    return [acquire(model, name, make) for name, make, _ in REPLACEMENTS[type(model).__name__]]
