"""I/O-free planning: named SQL statements, row codecs, search statements and psycopg adapters."""
