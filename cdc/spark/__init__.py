"""cdc.spark."""
