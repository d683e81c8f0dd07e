"""Train the demo model (kvprune.harness.demo) on the synthetic suite and save it with ``save_pretrained``.

    python -m scripts.train_demo_model                  # full run: one GPU, a few minutes
    python -m scripts.train_demo_model --quick          # reduced run on a CPU (a smoke test, near chance)

Seeded: items come from the suite's seed, the model from ``--seed``, batches from a seeded
permutation. Every item goes through the real processor once (chat template, ``<|AUDIO|>``
expansion, Whisper features) and its features are cached, so epochs only run the model. The loss
is cross-entropy on the answer letter and the ``<|im_end|>`` after it, plus an auxiliary loss
while training only: a linear head on each audio token (the encoder's output) must tell which
sounds are at that token's 40 ms (from the events the generator placed). It gives the encoder a
dense signal from the first step, where one answer letter per 15 s clip is a sparse one (short
runs from scratch without it sat near chance). The head is dropped: the saved model is the stock
architecture. Evaluation is greedy ``generate`` on processor outputs, unpruned and under a few
presses, per task.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen2_5OmniThinkerForConditionalGeneration

from kvprune import get_press
from kvprune.harness.demo.build import HIDDEN, IM_END, build_model, build_processor, build_tokenizer
from kvprune.harness.demo.synthetic import CHANCE, INSTRUCTIONS, LETTERS, TASKS, format_prompt, make_item

REPO = Path(__file__).resolve().parent.parent
EVAL_PRESSES = ("fastv", "random", "frame")
EVAL_RATIOS = (0.5, 0.75, 0.9)
TOKEN_SECONDS = 0.04  # one LLM audio token = 4 mel frames of 10 ms
SOUND_LABELS = ("beep", "click", "whistle", "chirp", "buzz", "swell")  # plus the 4 steady-tone registers


@dataclass
class Settings:
    train_per_task: int = 2500
    test_per_task: int = 20
    train_eval_per_task: int = 64
    epochs: int = 16
    max_steps: int | None = None  # cap on the schedule's length, fixed from the start
    batch: int = 64
    lr: float = 1.5e-3
    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    suite_seed: int = 0
    seed: int = 0
    workers: int = 16
    time_budget_s: float | None = None  # shrink the schedule if training would take longer
    aux_weight: float = 0.5  # weight of the per-audio-token auxiliary loss


QUICK = dict(train_per_task=24, test_per_task=4, train_eval_per_task=4, epochs=2, batch=8, workers=2)


# -- featurizing (worker processes) ----------------------------------------------------------------
_processor = None


def _init_worker() -> None:
    global _processor
    torch.set_num_threads(1)
    _processor = build_processor()


def chat_inputs(processor, wave: np.ndarray, prompt: str):
    """What a chat-template harness feeds the model: one user turn (audio, then text), the processor."""
    conversation = [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    return processor(text=text, audio=[wave], sampling_rate=16_000, return_tensors="pt", padding=True)


def token_labels(meta: dict, n_tokens: int) -> np.ndarray:
    """(tokens, 4 + sounds) 0/1: the steady tone's register (pitch clips: every token) and the sounds
    overlapping each token; short tones of any register count as beeps."""
    labels = np.zeros((n_tokens, len(LETTERS) + len(SOUND_LABELS)), dtype=np.uint8)
    if meta["task_name"] == "pitch":
        labels[:, LETTERS.index(meta["answer_gt"])] = 1
    for event in meta["events"]:
        sound = event["sound"].split("-")[0]
        first = int(event["start_s"] / TOKEN_SECONDS)
        last = int(math.ceil((event["start_s"] + event["seconds"]) / TOKEN_SECONDS))
        labels[first : min(last, n_tokens), len(LETTERS) + SOUND_LABELS.index(sound)] = 1
    return labels


def featurize(job: tuple[str, str, int, int, int]) -> dict:
    """One item through the processor; features cut to their valid frames (the model reads only those)."""
    task, split, index, suite_seed, instruction = job
    item = make_item(task, split, index, seed=suite_seed)
    inputs = chat_inputs(_processor, item.wave, format_prompt(item.meta, INSTRUCTIONS[instruction]))
    frames = int(inputs["feature_attention_mask"][0].sum())
    n_tokens = int((inputs["input_ids"][0] == _processor.tokenizer.audio_token_id).sum())
    return {
        "labels": token_labels(item.meta, n_tokens),
        "task": task,
        "answer": item.meta["answer_gt"],
        "input_ids": inputs["input_ids"][0].numpy().astype(np.int32),
        "features": inputs["input_features"][0, :, :frames].numpy().astype(np.float16),
    }


def featurize_all(jobs: list, workers: int) -> list[dict]:
    with ProcessPoolExecutor(workers, initializer=_init_worker) as pool:
        return list(pool.map(featurize, jobs, chunksize=16))


def split_jobs(split: str, per_task: int, settings: Settings, *, vary_instruction: bool) -> list:
    return [
        (task, split, i, settings.suite_seed, i % len(INSTRUCTIONS) if vary_instruction else 0)
        for task in TASKS for i in range(per_task)
    ]


# -- batches ---------------------------------------------------------------------------------------
class Cache:
    """Featurized items on the training device: padded later, per batch."""

    def __init__(self, items: list[dict], tokenizer, device):
        letter_ids = {letter: tokenizer.convert_tokens_to_ids(letter) for letter in LETTERS}
        self.ids = [torch.from_numpy(item["input_ids"]).long() for item in items]
        self.letters = torch.tensor([letter_ids[item["answer"]] for item in items])
        self.features = torch.from_numpy(np.stack([item["features"] for item in items])).to(device)
        self.labels = torch.from_numpy(np.stack([item["labels"] for item in items])).to(device)
        self.tasks = [item["task"] for item in items]
        self.answers = [item["answer"] for item in items]
        self.pad, self.end, self.device = tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids(IM_END), device

    def __len__(self) -> int:
        return len(self.ids)

    def training_batch(self, rows: np.ndarray) -> dict:
        """Prompt + answer letter, left-padded; the targets are the letter and then <|im_end|>."""
        sequences = [torch.cat([self.ids[r], self.letters[r : r + 1]]) for r in rows]
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for b, sequence in enumerate(sequences):
            input_ids[b, width - len(sequence) :] = sequence
            attention_mask[b, width - len(sequence) :] = 1
        index = torch.from_numpy(rows).to(self.device)
        features = self.features[index].float()
        targets = torch.stack([self.letters[rows], torch.full((len(rows),), self.end)], dim=1)
        return dict(
            input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
            input_features=features,
            feature_attention_mask=torch.ones(features.shape[0], features.shape[2], dtype=torch.long, device=self.device),
            targets=targets.to(self.device), token_labels=self.labels[index].flatten(0, 1).float(),
        )

    def inputs(self, row: int) -> dict:
        features = self.features[row : row + 1].float()
        ids = self.ids[row][None].to(self.device)
        return dict(
            input_ids=ids, attention_mask=torch.ones_like(ids), input_features=features,
            feature_attention_mask=torch.ones(1, features.shape[2], dtype=torch.long, device=self.device),
        )


# -- training --------------------------------------------------------------------------------------
def learning_rate(step: int, total: int, settings: Settings) -> float:
    warmup = max(1, int(settings.warmup_fraction * total))
    if step < warmup:
        return settings.lr * (step + 1) / warmup
    return settings.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def steps_within_budget(settings: Settings, total: int, step: int, elapsed: float, per_step: float, log) -> int:
    """The schedule's length, cut so that training ends within ``time_budget_s`` (checked once)."""
    affordable = max(step, int((settings.time_budget_s - elapsed) / per_step) + step)
    if affordable >= total:
        return total
    log(f"time budget: {per_step * 1000:.0f} ms/step, schedule shortened from {total} to {affordable} steps")
    return affordable


def train(model, cache: Cache, settings: Settings, log) -> dict:
    audio_tower = next(m for name, m in model.named_modules() if name.endswith("audio_tower"))
    encoded = []
    hook = audio_tower.register_forward_hook(lambda module, args, output: encoded.append(output.last_hidden_state))
    token_head = torch.nn.Linear(HIDDEN, cache.labels.shape[-1]).to(cache.device)
    parameters = [*model.parameters(), *token_head.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=settings.lr, betas=(0.9, 0.98), weight_decay=settings.weight_decay)
    order_rng = np.random.default_rng(settings.seed)
    per_epoch = len(cache) // settings.batch
    total = min(per_epoch * settings.epochs, settings.max_steps or per_epoch * settings.epochs)
    model.train()
    step, start, timed_from = 0, time.perf_counter(), None
    while step < total:
        for rows in np.array_split(order_rng.permutation(len(cache))[: per_epoch * settings.batch], per_epoch):
            if step >= total:
                break
            batch = cache.training_batch(rows)
            targets, labels = batch.pop("targets"), batch.pop("token_labels")
            logits = model(**batch, use_cache=False).logits[:, -2:].float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            aux = torch.nn.functional.binary_cross_entropy_with_logits(token_head(encoded.pop()), labels)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, total, settings)
            optimizer.zero_grad(set_to_none=True)
            (loss + settings.aux_weight * aux).backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            step += 1
            if step == 20:
                timed_from = time.perf_counter()
            if step == 60 and settings.time_budget_s:  # timed over steps 20-60, after warm-up costs
                now = time.perf_counter()
                total = steps_within_budget(settings, total, step, now - start, (now - timed_from) / 40, log)
            if step % 50 == 0 or step == total:
                accuracy = (logits[:, 0].argmax(-1) == targets[:, 0]).float().mean().item()
                log(f"step {step}/{total} loss {loss.item():.4f} aux {aux.item():.4f} batch accuracy {accuracy:.2f} "
                    f"lr {optimizer.param_groups[0]['lr']:.2e} {time.perf_counter() - start:.0f}s")
    hook.remove()
    model.eval()
    return {"steps": step, "epochs": round(step / per_epoch, 2), "seconds": round(time.perf_counter() - start, 1)}


# -- evaluation ------------------------------------------------------------------------------------
@torch.no_grad()
def answer(model, processor, inputs: dict, press=None) -> str:
    """The greedy reply, stripped (right when it is exactly the answer letter)."""
    def run():
        return model.generate(**inputs, max_new_tokens=3, do_sample=False)

    if press is None:
        out = run()
    else:
        with press(model):
            out = run()
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)[0].strip()


def accuracy(model, processor, cache: Cache, press=None) -> dict[str, float]:
    right: dict[str, list[bool]] = {task: [] for task in TASKS}
    for row in range(len(cache)):
        right[cache.tasks[row]].append(answer(model, processor, cache.inputs(row), press) == cache.answers[row])
    return {task: round(float(np.mean(hits)), 4) for task, hits in right.items() if hits}


def evaluate(model, processor, train_eval: Cache, test: Cache, pruned: bool, log) -> dict:
    report = {"chance": CHANCE, "train": accuracy(model, processor, train_eval), "test": accuracy(model, processor, test)}
    log(f"train accuracy {report['train']}\nheld-out accuracy {report['test']}")
    if pruned:
        report["pruned_test"] = {}
        for name in EVAL_PRESSES:
            for ratio in EVAL_RATIOS:
                scores = accuracy(model, processor, test, get_press(name, layer=2, ratio=ratio))
                report["pruned_test"][f"{name}@{ratio}"] = scores
                log(f"held-out {name} ratio {ratio}: {scores}")
    return report


# -- main ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "harness" / "demo" / "model", help="save_pretrained folder")
    parser.add_argument("--report", type=Path, default=None, help="write the accuracies here as JSON")
    parser.add_argument("--quick", action="store_true", help="reduced data and epochs, for a CPU")
    parser.add_argument("--pruned-eval", action="store_true", help="also evaluate held-out accuracy under presses")
    parser.add_argument("--init-from", type=Path, default=None, help="continue from a saved demo model")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, value in asdict(Settings()).items():
        kind = {"max_steps": int, "time_budget_s": float}.get(name, type(value))
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)
    args = parser.parse_args(argv)
    settings = Settings(**{**(QUICK if args.quick else {}),
                           **{k: v for k, v in vars(args).items() if k in Settings.__dataclass_fields__ and v is not None}})
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    log(f"settings {asdict(settings)} device {args.device}")
    torch.manual_seed(settings.seed)
    jobs = split_jobs("train", settings.train_per_task, settings, vary_instruction=True)
    train_items = featurize_all(jobs, settings.workers)
    test_items = featurize_all(split_jobs("test", settings.test_per_task, settings, vary_instruction=False), settings.workers)
    log(f"featurized {len(train_items)} train and {len(test_items)} held-out items")

    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    if args.init_from:
        model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(args.init_from).to(args.device)
    else:
        model = build_model(tokenizer, seed=settings.seed).to(args.device)
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters")
    report = {"settings": asdict(settings), "init_from": str(args.init_from) if args.init_from else None,
              "device": _device_name(args.device)}
    report["training"] = train(model, Cache(train_items, tokenizer, args.device), settings, log)

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    processor.save_pretrained(args.out)
    log(f"saved to {args.out}")
    eval_rows = [i for i, job in enumerate(jobs) if job[2] < settings.train_eval_per_task]
    train_eval = Cache([train_items[i] for i in eval_rows], tokenizer, args.device)
    test = Cache(test_items, tokenizer, args.device)
    report.update(evaluate(model, processor, train_eval, test, args.pruned_eval, log))
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.report:
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"


if __name__ == "__main__":
    raise SystemExit(main())
