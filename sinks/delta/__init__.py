"""sinks.delta."""
