"""Sinks, one module per sink. Sinks import no database driver."""
