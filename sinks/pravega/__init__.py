"""The Pravega sink (``type: pravega``): Debezium JSON change events in Pravega streams, exactly once."""
