"""binlog.mysql."""
