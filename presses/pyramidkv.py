"""PyramidKV: per-layer budgets that shrink with depth, over any press that scores (default SnapKV).

As PyramidKV (Cai et al., 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal
Information Funneling").

Lower layers spread their attention widely and keep more; higher layers concentrate it and keep
less. Each budget group keeps, at compressed layer ``d`` of ``m``, a budget falling linearly from
``2k - k/beta`` to ``k/beta`` (``k``: the uniform budget), rounded so that all layers together keep
exactly what uniform budgets keep (``kvprune.engine.cache_budgets.pyramid_keep``). Scores come from the
press it wraps (default SnapKV, as the paper): ``PyramidKVPress(press=SnapKVPress(window=32, kernel=7))``,
``pyramidkv:press=tova``, ``pyramidkv:press=snapkv(window=32,kernel=7)``. Composed
with a token-dropping press, the layers before and after K hold different counts; each layer's
budget then follows the pyramid of its own count, and the total is close to, not exactly, the
uniform one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvprune.engine.cache_budgets import pyramid_keep
from kvprune.press import DelegatingCachePress, register_press
from kvprune.keep_rules import keep_count


@register_press("pyramidkv")
@dataclass(frozen=True)
class PyramidKVPress(DelegatingCachePress):
    beta: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta < 1:
            raise ValueError(f"beta={self.beta} is invalid: the last layer keeps k/beta entries, so beta >= 1.")

    def keep(self, n: int, layer_idx: int, n_layers: int) -> int:
        return pyramid_keep(n, keep_count(n, self.ratio, self.keep_rule), layer_idx - self.layer, n_layers - self.layer, self.beta)
