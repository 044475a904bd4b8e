"""cdc.model.debezium."""
