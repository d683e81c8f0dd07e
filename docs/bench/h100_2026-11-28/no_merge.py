"""Scratch: the kvprune CLI with the audio merge left stock (the fast path without kvprune.encoders.merge): an A/B."""
import sys
from kvprune.encoders import handle, merge
for name in merge.MODEL_CLASSES:
    handle.ENCODER_KINDS.pop(name, None)
from kvprune.harness.cli import main
sys.exit(main())
