"""Images and video frames for the Omni families' processors on machines without torchvision.

The stock video processor of Qwen2.5-Omni and Qwen3-Omni (``Qwen2VLVideoProcessor``) needs
torchvision, which kvprune does not depend on (no torchvision build matches every torch wheel).
Where torchvision is missing, their processors get ``PilVideoProcessor``: each frame is resized,
rescaled and normalised by the stock PIL image processor (``Qwen2VLImageProcessorPil``: the same
``smart_resize`` target size as the video processor, PIL's bicubic resampling where the video
processor uses torchvision's), then the frames are grouped into temporal patches and flattened
exactly as ``Qwen2VLVideoProcessor.patchify`` does, so the grid, and with it every placeholder
count and position, is the stock one. Images go through ``Qwen2VLImageProcessorPil`` itself.
Where torchvision is installed, ``load_model`` uses the stock processor and none of this.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import BatchFeature, Qwen2VLImageProcessorPil
from transformers.image_utils import SizeDict

#: Qwen2VLVideoProcessor's default frame size bounds, in pixels (its ``size``)
VIDEO_SIZE = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}


class PilVideoProcessor:
    """``Qwen2VLVideoProcessor``'s output (``pixel_values_videos``, ``video_grid_thw``) for videos
    given as frames, (T, H, W, 3) uint8 arrays, without torchvision (module docstring)."""

    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, image_processor: Qwen2VLImageProcessorPil, size: dict | None = None):
        self.image_processor = image_processor
        self.patch_size = image_processor.patch_size
        self.temporal_patch_size = image_processor.temporal_patch_size
        self.merge_size = image_processor.merge_size
        self.size = dict(size or VIDEO_SIZE)

    def __call__(self, videos, size=None, return_tensors=None, **kwargs) -> BatchFeature:
        """Every video's patches, concatenated, and its (t, h, w) grid; ``size`` bounds the frame
        area as the stock processor's does; sampling options (``fps``) are the caller's business."""
        bounds = SizeDict(**dict(size or self.size))
        patches, grids = [], []
        for video in videos:
            frames = torch.from_numpy(np.stack([self._frame(frame, bounds) for frame in np.asarray(video)]))
            flat, grid = self._patchify(frames)
            patches.append(flat)
            grids.append(grid)
        return BatchFeature({"pixel_values_videos": torch.cat(patches), "video_grid_thw": torch.tensor(grids)})

    def _frame(self, frame: np.ndarray, bounds: SizeDict) -> np.ndarray:
        """One (H, W, 3) uint8 frame resized, rescaled and normalised, as (3, h, w) float32."""
        processor = self.image_processor
        image = np.moveaxis(frame, -1, 0)
        image = processor.resize(image, size=bounds, resample=processor.resample, factor=self.patch_size * self.merge_size)
        image = processor.rescale(image, processor.rescale_factor)
        return processor.normalize(image, processor.image_mean, processor.image_std).astype(np.float32)

    def _patchify(self, frames: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """``Qwen2VLVideoProcessor.patchify`` of one video, (T, C, h, w): the last frame repeated to
        a whole temporal patch, then (t, h/m, w/m, m, m, C, tp, p, p) flattened per patch."""
        if pad := -frames.shape[0] % self.temporal_patch_size:
            frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
        n_frames, channels, height, width = frames.shape
        p, m, tp = self.patch_size, self.merge_size, self.temporal_patch_size
        grid_t, grid_h, grid_w = n_frames // tp, height // p, width // p
        patches = frames.reshape(grid_t, tp, channels, grid_h // m, m, p, grid_w // m, m, p)
        patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
        return patches.reshape(grid_t * grid_h * grid_w, channels * tp * p * p), [grid_t, grid_h, grid_w]


def add_pil_vision(processor, name_or_path=None, **settings):
    """Give a processor built without torchvision an image processor and a video processor: the
    checkpoint's image settings (``preprocessor_config.json``, where it holds an image processor's:
    a ``patch_size``) where ``name_or_path`` has them, else ``Qwen2VLImageProcessorPil(**settings)``
    (``patch_size``, ``size``...)."""
    saved = None
    if name_or_path is not None:
        try:
            saved, _ = Qwen2VLImageProcessorPil.get_image_processor_dict(name_or_path)
        except OSError:  # nothing saved
            saved = None
    images = Qwen2VLImageProcessorPil.from_dict(saved) if saved and "patch_size" in saved else None
    processor.image_processor = images or Qwen2VLImageProcessorPil(**settings)
    processor.video_processor = PilVideoProcessor(processor.image_processor)
    return processor
