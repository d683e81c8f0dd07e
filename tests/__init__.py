"""kvprune's test suite, laid out like the code (core, generation, presses, models, harness parts); what
the tests share lives in ``tests.support``."""
