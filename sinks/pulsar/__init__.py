"""The Pulsar sink: Debezium JSON change events in Pulsar topics, exactly once (docs/sinks/pulsar.md)."""
