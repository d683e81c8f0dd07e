"""``kvprune estimate``: what a sweep will cost on this device before its first sample (``estimate``),
timed through the sweep's own generation path (``measure``), priced by published sizes where the data
is not there (``published``), written as estimate.csv and estimate.md (``report``)."""
