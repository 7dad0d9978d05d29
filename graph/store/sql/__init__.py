"""What SQLite and PostgreSQL share: the connection layer, our tables' schema, ledger and rows."""

__all__: list[str] = []
