"""The harness (kvprune.harness): the command line, audio loading and the long-audio policy, and one package per harness part."""
