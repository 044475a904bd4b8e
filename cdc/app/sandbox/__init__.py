"""cdc.app.sandbox."""
