"""The presses on every family's tiny model, against references computed in the tests."""
