"""What a run's results depend on, so that a results folder never passes one configuration's
results off as another's.

A run (one sample under one method at one ratio) is identified by

* ``settings_id``, per model x task: the model's fingerprint (a Hugging Face id and the revision its
  files come from, or a digest of a local folder's files), the weights' dtype, the attention
  backend, the generation settings (new tokens, greedy), the decoding cache (``--decoding`` as resolved:
  static or dynamic), the protocol, the long-audio policy and the task's resolved config (its channel
  policy included; under a protocol with conventions per model family, the model's family's form of
  the task, a task of its own name);
* ``method_id``: the method's full spec, every parameter of every press (its layer and keep rule
  included), not just the label it is shown under;
* ``sample_id`` and ``input_hash``: the prompt's text and the content of each audio file it reads
  (a digest, cached by path, size, modification and status-change time in ``audio-digests.json``:
  ``AudioDigests`` says what that trusts);
* the ratio.

A row also records its sample's ``grade_hash`` (the gold answer, options, item and metadata its
score depends on): a row whose run is done but whose grade hash is out of date is scored again from
its stored output (``rescore``), not generated again.

A sweep writes its ``SweepPlan`` (all of the above for everything the configuration asks for) to
``plan.json`` when it starts. The next start in the same folder compares its plan with it: settings
that differ are refused (``differences``), while new methods, ratios, tasks or samples extend the
folder, and samples whose audio or prompt changed simply run again. Summaries read the plan and
summarise exactly the runs it asks for (``SweepPlan.select``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .disk import write_json

if TYPE_CHECKING:
    from .rows import ResultRow

PLAN_FILE = "plan.json"
DIGESTS_FILE = "audio-digests.json"
HASHED_FILE_BYTES = 64 * 2**20  # local model files up to this size are digested by content
_CHUNK = 2**20


def digest(value) -> str:
    """A short stable digest of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def file_digest(path: Path) -> str:
    hasher = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            hasher.update(block)
    return hasher.hexdigest()


def model_fingerprint(path: str, trust_remote_code: bool = False) -> str:
    """What a model's outputs depend on besides the settings: for a local folder, a digest of its
    files (weights, configs, tokenizer, processor, chat template; files over 64 MiB by size and
    modification time, the others by content); for a Hugging Face id, the id and the revision
    (commit) its files come from."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        files = []
        for file in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
            stat = file.stat()
            content = file_digest(file) if stat.st_size <= HASHED_FILE_BYTES else f"{stat.st_size}:{stat.st_mtime_ns}"
            files.append((str(file.relative_to(folder)), content))
        return f"local:{digest(files)}"
    import transformers  # a summary of a folder (plan.json) needs no transformers; a sweep's plan of a hub model does

    config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    revision = getattr(config, "_commit_hash", None) or f"config {digest(config.to_dict())}"
    return f"hub:{path}@{revision}"


class AudioDigests:
    """Content digests of audio files, remembered in the results folder (``audio-digests.json``) by
    path, size, modification time and status-change time (``ctime``), so that a resumed sweep reads
    a file again only if one of them changed. What is trusted: that a file whose four are unchanged
    has its old content. Writing a file changes its ctime, and no user tool sets a ctime back (``touch
    -r`` sets the modification time only), so content changed in place is read again; a file system
    that does not keep ctimes, or a clock set back, can defeat it: ``rehash`` (``--rehash-audio``)
    digests every file from its content, whatever the cache says. A file that cannot be read is not
    cached: its sample's run records the error."""

    def __init__(self, out_dir: Path, rehash: bool = False):
        self.path = Path(out_dir) / DIGESTS_FILE
        self.rehash = rehash
        try:
            self._known = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._known = {}
        self._changed = False
        self._fresh: set[str] = set()  # keys digested by this instance

    def __call__(self, file: Path) -> str:
        file = Path(file).resolve()
        try:
            stat = file.stat()
        except OSError:
            return "missing"  # the run records the error when it tries to read it
        key = f"{file}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}"
        if key not in self._fresh and (self.rehash or key not in self._known):
            try:
                self._known[key] = file_digest(file)
            except OSError:
                return "unreadable"  # permissions: the run records the error when it tries to read it
            self._fresh.add(key)
            self._changed = True
        return self._known[key]

    def save(self) -> None:
        if self._changed:
            write_json(self.path, self._known)
            self._changed = False


def input_hash(prompt: str, audio_digests: list[str]) -> str:
    """The prompt's text and the content of its audio files, in order."""
    return digest([prompt, audio_digests])


def grade_hash(sample) -> str:
    """What a stored output's score depends on besides the output and the task's config: the
    sample's gold answer, its options, its item and its metadata (categories, a benchmark's entry)."""
    return digest([sample.answer, list(sample.choices), sample.item, sample.meta])


@dataclass
class SweepPlan:
    """Everything a sweep configuration asks for, with what the results depend on."""

    #: folder-wide settings that change outputs (a difference is refused)
    settings: dict
    models: dict[str, str]  # model name -> fingerprint
    tasks: dict[str, dict]  # task name -> its resolved config
    methods: dict[str, dict]  # method_id -> {label, spec, layer}
    runs: list[tuple[str, float]]  # (method_id, ratio), the baseline included
    settings_ids: dict[str, dict[str, str]]  # model -> task -> settings_id
    samples: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> sample_id -> input_hash
    grades: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> sample_id -> grade_hash

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, values: dict) -> "SweepPlan":
        values = dict(values)
        values["runs"] = [(m, float(r)) for m, r in values["runs"]]
        return cls(**values)

    def select(self, rows: list[ResultRow], graded: bool = True) -> list[ResultRow]:
        """The rows of the runs this plan asks for: its models, tasks, methods x ratios and samples,
        with the settings and inputs it has now, and (``graded``) scored against the samples' answers
        and metadata as they are now."""
        runs = {(m, round(r, 6)) for m, r in self.runs}
        kept = []
        for row in rows:
            if (row.method_id, round(float(-1 if row.ratio is None else row.ratio), 6)) not in runs:
                continue
            if self.settings_ids.get(row.model, {}).get(row.task) != row.settings_id:
                continue
            if self.samples.get(row.task, {}).get(row.sample_id) != row.input_hash:
                continue
            if graded and not self.graded_now(row):
                continue
            kept.append(row)
        return kept

    def current(self, rows: list[ResultRow]) -> list[ResultRow]:
        """Every row but those of samples this plan knows in another version: another prompt or
        audio (the sample ran again), other answers or metadata (the output was scored again)."""
        def now(row: ResultRow) -> bool:
            known = self.samples.get(row.task, {}).get(row.sample_id, row.input_hash)
            return known == row.input_hash and self.graded_now(row)

        return [row for row in rows if now(row)]

    def graded_now(self, row: ResultRow) -> bool:
        """Whether ``row`` was scored against its sample's answers and metadata as this plan knows
        them (plans written before grades were recorded know none: every row is)."""
        known = self.grades.get(row.task, {}).get(row.sample_id)
        return known is None or row.grade_hash == known

    def differences(self, recorded: "SweepPlan") -> list[str]:
        """The settings of ``recorded`` (an earlier start in the same folder) that this plan changes:
        folder-wide settings, and the models and tasks both name. Each says what it was and is."""
        dropped = {name: None for name, value in recorded.settings.items() if name not in self.settings and value}
        found = [  # a setting recorded only when on (--no-audio) differs when it was on and is off now
            _difference(name, recorded.settings.get(name), value)
            for name, value in {**self.settings, **dropped}.items() if recorded.settings.get(name) != value
        ]
        for model in sorted(set(self.models) & set(recorded.models)):
            if self.models[model] != recorded.models[model]:
                found.append(f"model {model}: its files or revision changed ({recorded.models[model]} before, {self.models[model]} now)")
        for task in sorted(set(self.tasks) & set(recorded.tasks)):
            before, now = recorded.tasks[task], self.tasks[task]
            changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
            if changed:
                found.append(f"task {task}: its config changed ({', '.join(changed)})")
        return found

    def gaps(self, results: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """(model, task) -> (runs with a result, runs planned), for the pairs the results (each result's
        model and task, of the plan's own selection) do not complete: what an interrupted sweep has not run yet."""
        done: dict[tuple[str, str], int] = {}
        for pair in results:
            done[pair] = done.get(pair, 0) + 1
        planned = {(model, task): len(self.samples.get(task, {})) * len(self.runs)
                   for model in self.models for task in self.settings_ids.get(model, {})}  # the tasks each model runs
        return {pair: (done.get(pair, 0), n) for pair, n in planned.items() if done.get(pair, 0) < n}

    def changed_samples(self, recorded: "SweepPlan") -> int:
        """Samples both plans hold whose prompt or audio changed since ``recorded``: they run again."""
        return sum(
            1 for task, samples in self.samples.items() for sample_id, hashed in samples.items()
            if recorded.samples.get(task, {}).get(sample_id, hashed) != hashed
        )


def _difference(name: str, before, now) -> str:
    """One setting that changed, in words (``--no-audio``: what the folder holds and what this runs)."""
    if name == "no_audio":
        held = "runs without their audio (a --no-audio ablation)" if before else "runs with their audio"
        return (f"no_audio: the folder holds {held}, and this sweep runs {'without' if now else 'with'} audio: an "
                "ablation and pruning results never share a folder")
    return f"{name}: {_shown(before)} before, {_shown(now)} now"


def _shown(value) -> str:
    return "unset" if value is None else str(value)


def read_plan(out_dir: Path | str) -> SweepPlan | None:
    path = Path(out_dir) / PLAN_FILE
    if not path.exists():
        return None
    try:
        return SweepPlan.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is unreadable ({error}); it records what the folder's sweep asked for: rerun the sweep with "
            "--overwrite, or summarise every result with `kvprune report --all`."
        ) from None


def write_plan(out_dir: Path, plan: SweepPlan) -> None:
    write_json(Path(out_dir) / PLAN_FILE, plan.to_json())
