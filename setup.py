"""The packages setuptools installs, found rather than listed: every folder of kvprune/, presses/ and
harness/ (pyproject.toml's package-dir installs the last two inside kvprune), those of data files alone
included, so that a new folder (a benchmark's) ships without a line here or in pyproject.toml. The
files each one ships besides its modules are pyproject.toml's package-data."""

from setuptools import find_namespace_packages, setup

ROOTS = {"kvprune": "kvprune", "kvprune.presses": "presses", "kvprune.harness": "harness"}

setup(packages=[
    package
    for name, folder in ROOTS.items()
    for package in [name, *(f"{name}.{found}" for found in find_namespace_packages(where=folder, exclude=["*__pycache__*"]))]
])
