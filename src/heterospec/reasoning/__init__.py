"""Step-level speculative reasoning (HeteroReason's RSD / BRSD) run for real on three devices."""
