"""Task YAML files: reading one into its resolved config, ``include:`` inheritance included.

``include:`` names one file or a list of them, whose fields the including file starts from:

- a value ending in ``.yaml`` or ``.yml`` is a path, relative to the including file's folder;
- any other value is a built-in config by name, in any benchmark's folder: a task (``include: gtzan``)
  or a base that exists only to be included (``include: _mmau``; files whose name starts with ``_``
  are not tasks).

Merging is a plain override of top-level keys: included files are applied in order, then the
including file's own fields replace theirs whole (a ``layout_options`` mapping is replaced, not
merged key by key). ``name`` is never inherited: a task is named by its own ``name:`` field, or else
by its file name without ``.yaml``. Includes nest; a file that includes itself, directly or not,
is refused with the chain that loops.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .benchmark import builtin_configs

YAML_SUFFIXES = (".yaml", ".yml")


class TaskConfigError(ValueError):
    """A task YAML file is malformed: names the file and the field."""


def is_task_file(text: str) -> bool:
    """Whether a task reference (``--tasks`` entry, ``include:`` value) is a path to a YAML file."""
    return str(text).endswith(YAML_SUFFIXES)


def read_task_config(path: Path | str) -> dict:
    """The fields of the task in ``path`` with its includes resolved, ``include`` removed and
    ``name`` set (see the module docstring)."""
    path = Path(path)
    config = _resolved(path, chain=())
    config.setdefault("name", path.stem)
    return config


def _resolved(path: Path, chain: tuple[Path, ...]) -> dict:
    key = path.resolve()
    if key in chain:
        loop = " -> ".join(p.name for p in (*chain[chain.index(key):], key))
        raise TaskConfigError(f"{chain[-1]}: field 'include': include cycle {loop}; remove one of these includes")
    raw = _read_mapping(path)
    merged: dict = {}
    for reference in _includes(raw.pop("include", None), path):
        inherited = _resolved(_included_path(reference, path), (*chain, key))
        inherited.pop("name", None)  # a task's name is its own
        merged.update(inherited)
    merged.update(raw)
    return merged


def _read_mapping(path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TaskConfigError(f"{path}: cannot read the file ({error})") from None
    except yaml.YAMLError as error:
        raise TaskConfigError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(raw, dict):
        raise TaskConfigError(f"{path}: expected a mapping of task fields")
    return raw


def _includes(value, path: Path) -> list[str]:
    references = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(references, list) or not all(isinstance(r, str) and r for r in references):
        raise TaskConfigError(f"{path}: field 'include': expected a file or a built-in config name, or a list of them")
    return references


def _included_path(reference: str, including: Path) -> Path:
    if is_task_file(reference):
        return including.parent / reference
    builtin = builtin_configs()
    if reference not in builtin:
        raise TaskConfigError(
            f"{including}: field 'include': no built-in config {reference!r}; built-in: {', '.join(builtin)} "
            "(a file path must end in .yaml or .yml)"
        )
    return builtin[reference]
