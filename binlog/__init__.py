"""Change-log readers, one module per database (``mysql.py`` for MySQL and MariaDB)."""
