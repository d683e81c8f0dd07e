"""Combine estimates of one sweep's tasks made in several calls (each under a device's time limit) into one
estimate.csv and estimate.md, with the totals and the ratios with and without LibriSpeech:

    python scripts/combine_estimates.py --out am_7b am_libri am_a am_b am_c

Each folder holds an ``estimate.csv`` of ``kvprune estimate`` with the same options but ``--tasks``; a task
priced twice keeps its first row, and what a sweep pays once (``fixed``) is the first folder's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from kvprune.harness.estimate.report import write_estimate
from kvprune.harness.estimate.report_rows import FIXED, TOTAL, totals_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders holding estimate.csv")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tables = [pd.read_csv(folder / "estimate.csv") for folder in args.folders]
    rows = pd.concat([t[~t["task"].isin([TOTAL, FIXED])] for t in tables]).drop_duplicates(["task", "mode"])
    fixed = tables[0][tables[0]["task"] == FIXED]
    table = totals_table(pd.concat([rows, fixed]).to_dict("records"))
    command = "python scripts/combine_estimates.py " + " ".join(str(folder) for folder in args.folders)
    print(write_estimate(table, args.out, command)[1].read_text())


if __name__ == "__main__":
    main()
