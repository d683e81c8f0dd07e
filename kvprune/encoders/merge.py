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


def _forward_arguments(args: tuple, kwargs: dict, *names: str) -> list:
    """The model forward's arguments ``names``, given by name or by position (the three models' forwards begin
    alike: ``input_ids, input_features``, then Granite's and Audio Flamingo 3's ``input_features_mask``)."""
    order = ("input_ids", "input_features", "input_features_mask")
    return [kwargs.get(name, args[order.index(name)] if len(args) > order.index(name) else None) for name in names]


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
        input_ids, features = _forward_arguments(args, kwargs, "input_ids", "input_features")
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


class GatheredFrames:
    """Granite Speech's ``get_merged_audio_embeddings`` with the feature mask's frames gathered at positions the
    forward's pre-hook found (before the encoder is queued: the read of the mask waits for nothing of it), then
    the stock method with no mask. A call the pre-hook did not see (another mask, none) takes the stock method."""

    def __init__(self, model: nn.Module):
        self.stock = model.get_merged_audio_embeddings
        self.selection: tuple[torch.Tensor, torch.Tensor] | None = None  # (the mask read, its flat positions)
        self._hook = model.register_forward_pre_hook(self._find, with_kwargs=True)

    def _find(self, module, args, kwargs) -> None:
        features, mask = _forward_arguments(args, kwargs, "input_features", "input_features_mask")
        self.selection = None
        if features is not None and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 2:
            self.selection = (mask, mask.reshape(-1).nonzero().squeeze(1))

    def __call__(self, input_ids: torch.Tensor, audio_features: torch.Tensor,
                 input_features_mask: torch.Tensor | None = None) -> torch.Tensor:
        selection, self.selection = self.selection, None
        if (selection is None or selection[0] is not input_features_mask
                or audio_features.shape[:-1] != input_features_mask.shape):
            return self.stock(input_ids, audio_features, input_features_mask)
        positions = selection[1].to(audio_features.device)
        kept = audio_features.reshape(-1, audio_features.shape[-1]).index_select(0, positions)
        return self.stock(input_ids, kept, None)

    def close(self) -> None:
        self._hook.remove()


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
