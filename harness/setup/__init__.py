"""What ``kvprune sweep`` and ``kvprune bench`` share before and around their runs, written once.

- ``options``: the command-line options both take, each spelled and explained once;
- ``config``: one shape for both configurations (defaults, a YAML file, command-line overrides; a
  configuration that exists has been validated);
- ``ratio_lists``: ratio lists as users write them;
- ``device``: the device checked before anything loads, the decoding cache it gets, its name, and
  releasing its memory after a failure;
- ``methods``: every method at every ratio checked against a model's skeleton on the meta device;
- ``environment``: the record of what ran where (device name, versions, time).

The two commands build on this layer side by side; neither imports the other.
"""
