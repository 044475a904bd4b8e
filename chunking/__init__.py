"""Snapshot chunking: the chunk splitter and the lock-free (watermark) chunk reader."""
