"""Examples built on the public API (the demo behind `pgmem demo`)."""
