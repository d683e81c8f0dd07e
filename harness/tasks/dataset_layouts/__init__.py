"""Dataset readers: the native data layouts of benchmark datasets, registered by name.

A layout is a small dataclass built from a task's ``layout_options``. ``load(task_dir)`` reads one
task folder into Samples in a deterministic order and checks that every audio file it references
exists. A problem with the whole folder (no metadata file, not JSON, no items) raises
``TaskDataError``; a problem with one item (a missing field or audio file, a gold answer that is no
option) makes that item a ``Sample.broken`` whose message names the item and the fix, so one bad
item does not stop a sweep. ``describe(task_dir)`` says what the layout expects (the task appends it
to errors); ``metadata_fields()`` which metadata keys its samples carry (None: it cannot say), and
``audio_names()`` the named audio files a prompt segment may use. Several tasks share one layout with
different options.
"""

from .base import GOLD_FORMS, LAYOUTS, Layout, gold_answer, gold_letter, read_items

# the built-in layouts register themselves in LAYOUTS as they are imported
from .json_items import JsonItems
from .trees import FolderLabels, LibriSpeechTree

__all__ = ["GOLD_FORMS", "LAYOUTS", "Layout", "gold_answer", "gold_letter", "read_items",
           "FolderLabels", "JsonItems", "LibriSpeechTree"]
