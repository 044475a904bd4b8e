"""cdc.app."""
