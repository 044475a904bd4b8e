"""cdc.model."""
