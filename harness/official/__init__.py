"""Scoring rules of published audio benchmarks, reproduced from their official evaluation code.

One module per benchmark, plain functions over plain data (no model, no files beyond the
benchmark's own metadata), each saying which official function it mirrors:

- ``starbench``: STAR-Bench's answer parser, option rotations, clip-order permutations, AA/ACR, MA.
- ``mmau``: MMAU's ``string_match`` (also MMAR's), their item files and accuracy tables.
- ``avibench``: AVI-Bench's audio-only tasks ASQA (full match + double confirm) and AMIC
  (semantic F1 + counting score), without the official LLM "refine" step.
- ``audiomarathon``: AudioMarathon's per-task answer extraction (its Qwen2.5-Omni scripts) and its
  pruning arithmetic (kept count, frame offsets); ``audiomarathon_scores``: its F1 variants and ASR
  WER; ``audiomarathon_models``: the extractors and scoring rules of its Phi-4-MM, Aero-1 and
  Voxtral scripts; ``audiomarathon_durations``: the duration buckets of its analysis scripts.
- ``staudioqa``: provisional ST-AudioQA metrics from its paper (no official scorer is public).
- ``classification``: the F1 and average-precision arithmetic the modules share.

Numbers are on the official code's own scale (0-1 or percent), as each function's docstring says.
"""
