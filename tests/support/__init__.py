"""What several test modules share: tiny models and processors of every family, dataset fixtures in each
benchmark's layout, reference implementations, virtual devices. Imported as ``tests.support.<module>``."""
