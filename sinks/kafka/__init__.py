"""The Kafka sink: Debezium JSON change events in Kafka topics, exactly once (docs/sinks/kafka.md)."""
