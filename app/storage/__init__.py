"""The Delta facade and table locations: how every stage reads and writes its tables."""
