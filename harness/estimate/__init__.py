"""``kvprune estimate``: what a sweep will cost on this device before its first sample (``estimate``),
timed through the sweep's own sample runner and executor (``timing``) on its samples or made-up ones
(``synthetic``: at the data's or the published durations, ``published``, with answers of planned
lengths, ``answers``), priced (``pricing``, what a sweep pays once: ``outputs``, and ending its process:
``process_end``) and checked against
the compute floor (``floor``), written as estimate.csv and estimate.md (``report_rows``, ``report``).
The same made-up samples make ``kvprune sweep --preset`` a dry run at a real shape (``dry_run``), and
``kvprune sweep --batch-size auto`` runs the size the estimate prices cheapest (``auto_batch``)."""
