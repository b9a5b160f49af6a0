"""PostgreSQL adapter (asyncpg): the envelope store, the sequencer and migrations."""
