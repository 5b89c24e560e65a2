"""Operations: the embedded server, migrations, the schema declaration, analytics, the report and the CLI."""
