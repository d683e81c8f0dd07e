"""The ``kvprune`` command line."""

from __future__ import annotations

import argparse
import sys


def _presses(args) -> int:
    from kvprune import list_presses

    print("\n".join(list_presses()))
    return 0


def _families(args) -> int:
    from kvprune import list_families

    for family in list_families():
        print(f"{family.name:16s} {family.display_name:18s} {', '.join(family.architectures)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvprune", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("presses", help="list the presses").set_defaults(run=_presses)
    commands.add_parser("families", help="list the supported model families").set_defaults(run=_families)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
