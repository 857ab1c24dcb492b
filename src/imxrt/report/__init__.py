"""Report stage: placement, coverage and (later) memory and latency, as JSON and text."""
