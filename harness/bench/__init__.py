"""The bench side: prefill and decode timed at real model shapes with random weights, on one device."""
