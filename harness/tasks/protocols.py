"""Protocols: whose conventions a task's run follows, from the prompt to the press's kept-token count.

A task follows one protocol (its ``protocol`` field) and may offer others (``protocols``: each the
task fields it changes); ``kvprune sweep --protocol NAME`` runs every task under that protocol and
gives each press the protocol's keep rule. A protocol may also hold conventions per model family
(``families``: a family name -> the fields it changes on top), for a benchmark whose published scripts
prompt and score each model its own way (AudioMarathon's); the sweep resolves them for each model's
family (``resolved_config``). A protocol's own conventions may be one family's (``WRITTEN_FOR``:
AudioMarathon's are its Qwen2.5-Omni scripts'): a model of another family that the task holds no
conventions for keeps its own family's defaults (``FAMILY_DEFAULTS``: its own system turn, not
Qwen's), each family speaking through its own chat template. docs/protocols.md lists every difference.
"""

from __future__ import annotations

OFFICIAL = "official"
PROTOCOLS = {
    OFFICIAL: "the benchmark's own rules, as its official code runs and scores them",
    "kvprune": "kvprune's: unparsed answers count as wrong, every clip's kept count rounded",
    "provisional": "our reading of a benchmark's paper, until it publishes its data layout and scorer",
    "audiomarathon": "the conventions of AudioMarathon's published scripts, to compare with its leaderboard",
}
KEEP_RULES = {"audiomarathon": "floor"}  # protocols whose kept-token count is not kvprune's (kvprune.keep_rules)
FAMILY_LAYERS = "families"
MERGED = ("layout_options", "metric_options")  # fields a protocol or family changes key by key
NOT_CHANGED = ("name", "protocol", "protocols", "family", FAMILY_LAYERS)  # fields no layer may set
#: protocol -> the model family its own conventions were written for (AudioMarathon's Qwen2.5-Omni scripts)
WRITTEN_FOR = {"audiomarathon": "qwen2_5_omni"}
#: the layer of a family a protocol written for another holds no conventions for: its own system turn
#: (the task's own, None for AudioMarathon's tasks: whatever its chat template writes without one)
FAMILY_DEFAULTS = {"system": None}


def keep_rule(protocol: str | None) -> str | None:
    """The keep rule a sweep under ``protocol`` gives every press that sets none (None: the presses' own)."""
    return KEEP_RULES.get(protocol)


def resolved_config(config: dict, protocol: str, family: str | None = None) -> dict:
    """A task's config (as read, with its ``protocols``) under ``protocol``, which it offers: the
    protocol's fields replace the task's, then, when the protocol has conventions of its own for the
    model ``family``, that family's fields replace those (``layout_options`` and ``metric_options``
    key by key; a field set to null goes back to the task's own value, or away if it has none); a
    family it has none for, under a protocol written for another family, keeps its own defaults
    (``FAMILY_DEFAULTS``). The task is named ``<name>@<protocol>``, or in a family's form
    ``<name>@<protocol>:<family>``, the family recorded as ``family``: results made under different
    conventions never share a name."""
    changes = dict(config["protocols"][protocol])
    layer = changes.pop(FAMILY_LAYERS, {}).get(family)
    written_for = WRITTEN_FOR.get(protocol)
    if layer is None and family is not None and written_for is not None and family != written_for:
        layer = FAMILY_DEFAULTS
    resolved = {key: value for key, value in config.items() if key != "protocols"}
    for fields in (changes, layer or {}):
        for key, value in fields.items():
            if value is None and key in config:
                resolved[key] = config[key]
            elif value is None:
                resolved.pop(key, None)
            elif key in MERGED and isinstance(value, dict):
                resolved[key] = {**resolved.get(key, {}), **value}
            else:
                resolved[key] = value
    resolved.update(name=f"{config['name']}@{protocol}" + (f":{family}" if layer else ""), protocol=protocol)
    if layer:
        resolved["family"] = family
    return resolved


def identity_config(config: dict) -> dict:
    """A task's config as its runs' identity holds it: without the conventions per model family that
    its other protocols hold. A task under its own protocol never uses them (one resolved under a
    protocol carries its family's fields instead), so adding them does not change what a folder
    written before means, and its runs stay resumable."""
    protocols = {name: {key: value for key, value in changes.items() if key != FAMILY_LAYERS} if isinstance(changes, dict)
                 else changes for name, changes in config.get("protocols", {}).items()}
    return {**config, "protocols": protocols} if "protocols" in config else config


def family_problem(protocols: dict) -> str | None:
    """What is wrong with the family layers of a task's ``protocols``, if anything."""
    for name, changes in protocols.items():
        layers = changes.get(FAMILY_LAYERS, {}) if isinstance(changes, dict) else {}
        if not isinstance(layers, dict):
            return f"{name}: {FAMILY_LAYERS} must map model family names to the fields they change"
        for family, fields in layers.items():
            from kvprune.models import FAMILIES  # loads transformers: only for a task with family layers

            if family not in FAMILIES:
                return f"{name}: {FAMILY_LAYERS}: unknown model family {family!r}; the families are {FAMILIES.names()}"
            if not isinstance(fields, dict):
                return f"{name}: {FAMILY_LAYERS}: {family}: expected the task fields it changes, got {fields!r}"
            fixed = sorted(set(fields) & set(NOT_CHANGED))
            if fixed:
                return f"{name}: {FAMILY_LAYERS}: {family}: {fixed} cannot be changed per family"
    return None
