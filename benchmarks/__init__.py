"""pgmem's benchmarks: each hot path side by side with what a user would otherwise pick, in one run."""
