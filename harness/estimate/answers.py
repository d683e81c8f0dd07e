"""How long each sample's answer is, in tokens (its end token included): what an estimate and a dry
run decode, since random weights never stop on their own.

With a task's data, each sample's gold answer counted by the model's tokenizer (a word counts
``TOKENS_PER_WORD`` where there is no tokenizer: a bench preset). Without it, by what the task's
answers are (``published.PublishedSize.answer``):

* an option's letter: ``LETTER_TOKENS`` (the letter and the end token; AudioMarathon's prompts ask
  for "only the letter");
* a transcript: the words spoken in the clip, at ``WORDS_PER_SECOND`` (LibriSpeech test-clean, read
  speech: about 52.6k words in its 5.4 hours, 2.7 words per second), ``TOKENS_PER_WORD`` tokens each
  (English in a byte-level BPE vocabulary such as Qwen2's: about 1.3), after the ``ANSWER_PREFIX_TOKENS``
  of "Spoken Content:" the prompt asks for. A 4-minute passage: ~850 tokens (the task's limit: 1,100).

A task with neither is priced at its ``max_new_tokens``, and says so. A batch decodes as long as its
longest answer (``sweep.execute``), which the estimate prices batch by batch.
"""

from __future__ import annotations

import math

LETTER_TOKENS = 2
WORDS_PER_SECOND = 2.7
TOKENS_PER_WORD = 1.3
ANSWER_PREFIX_TOKENS = 4


def published_answer_tokens(kind: str, seconds: float) -> int:
    """The planned answer length of a sample of ``seconds`` whose answers are ``kind`` (``letter``, ``transcript``)."""
    if kind == "letter":
        return LETTER_TOKENS
    if kind == "transcript":
        return ANSWER_PREFIX_TOKENS + math.ceil(WORDS_PER_SECOND * TOKENS_PER_WORD * seconds) + 1
    raise ValueError(f"answers of kind {kind!r} have no planned length: 'letter' or 'transcript'.")


def gold_answer_tokens(answer: str, tokenizer=None) -> int:
    """The tokens of a gold answer and the end token (``tokenizer``: the model's; None: words counted)."""
    if tokenizer is None:
        return math.ceil(TOKENS_PER_WORD * len(answer.split())) + 1
    return len(tokenizer(answer, add_special_tokens=False)["input_ids"]) + 1
