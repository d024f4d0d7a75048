"""Table locations, table handles and each table's engine: how every stage reads and writes its tables."""
