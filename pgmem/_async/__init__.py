"""The async implementation, the one source of truth: ``pgmem/_sync`` is generated from it by
``tools/gen_sync.py`` (a test fails when the generated copy is out of date)."""
