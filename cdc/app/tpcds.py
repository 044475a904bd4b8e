"""TPC-DS ``customer`` data: generate it with ``tpcgen-cli`` and load it into a sandbox server.

Used by the demo (``python -m cdc demo``) and the benchmarks (benchmarks/tpcds.py).

``tpcgen-cli tpcds csv`` writes one comma-separated file per table with a header line, fields that
contain a comma enclosed in double quotes, and empty fields for NULL. :func:`load_customer` loads it
with a server-side ``LOAD DATA INFILE`` (the sandbox runs ``mariadbd`` on this machine as the
current user, so the server can read the generated file), turning empty fields into NULL.

Scale factor 1 is 100,000 customers, 0.01 is 1,000; scale factor 100 is 2,000,000.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

from binlog.mysql.types import quote_ident
from cdc.app.sandbox.mysql import Sandbox

# The TPC-DS specification's customer table (v3), with the surrogate key as BIGINT primary key.
CUSTOMER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("c_customer_sk", "BIGINT NOT NULL"),
    ("c_customer_id", "CHAR(16) NOT NULL"),
    ("c_current_cdemo_sk", "INTEGER"),
    ("c_current_hdemo_sk", "INTEGER"),
    ("c_current_addr_sk", "INTEGER"),
    ("c_first_shipto_date_sk", "INTEGER"),
    ("c_first_sales_date_sk", "INTEGER"),
    ("c_salutation", "CHAR(10)"),
    ("c_first_name", "CHAR(20)"),
    ("c_last_name", "CHAR(30)"),
    ("c_preferred_cust_flag", "CHAR(1)"),
    ("c_birth_day", "INTEGER"),
    ("c_birth_month", "INTEGER"),
    ("c_birth_year", "INTEGER"),
    ("c_birth_country", "VARCHAR(20)"),
    ("c_login", "CHAR(13)"),
    ("c_email_address", "CHAR(50)"),
    ("c_last_review_date_sk", "INTEGER"),
)

# The spec's row counts of customer at its official scale factors (not linear above 100).
CUSTOMER_ROWS = {1: 100_000, 10: 500_000, 100: 2_000_000, 300: 5_000_000, 1000: 12_000_000,
                 3000: 30_000_000, 10000: 65_000_000, 30000: 80_000_000, 100000: 100_000_000}


def customer_rows(scale: int) -> int:
    """About how many rows customer has at ``scale`` (exact at the official scale factors)."""
    if scale in CUSTOMER_ROWS:
        return CUSTOMER_ROWS[scale]
    below = max((s for s in CUSTOMER_ROWS if s < scale), default=1)
    above = min((s for s in CUSTOMER_ROWS if s > scale), default=None)
    if above is None:
        return CUSTOMER_ROWS[below]
    lo, hi = CUSTOMER_ROWS[below], CUSTOMER_ROWS[above]
    return lo + (hi - lo) * (scale - below) // (above - below)


def customer_ddl(table: str = "customer") -> str:
    """``CREATE TABLE`` for TPC-DS customer (utf8mb4, InnoDB, primary key c_customer_sk)."""
    cols = ",\n  ".join(f"{quote_ident(name)} {sql_type}" for name, sql_type in CUSTOMER_COLUMNS)
    return (
        f"CREATE TABLE {quote_ident(table)} (\n  {cols},\n  PRIMARY KEY (`c_customer_sk`)\n)"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def tpcgen_cli() -> str:
    """Path of ``tpcgen-cli`` (next to this interpreter first, then on PATH).

    Raises:
        FileNotFoundError: tpcgen-cli is not installed (``pip install tpcgen-cli``).
    """
    beside = Path(sys.executable).with_name("tpcgen-cli")
    found = str(beside) if beside.exists() else shutil.which("tpcgen-cli")
    if not found:
        raise FileNotFoundError("tpcgen-cli not found: pip install tpcgen-cli (`make setup` installs it)")
    return found


def generate_customer(scale: float, out_dir: Path) -> Path:
    """Write TPC-DS ``customer`` at ``scale`` as CSV into ``out_dir`` and return the file.

    Fractional scales work: 0.01 is 1,000 customers.

    Raises:
        subprocess.CalledProcessError: tpcgen-cli failed.
        FileNotFoundError: tpcgen-cli is not installed, or wrote no customer file.
    """
    subprocess.run(
        [tpcgen_cli(), "tpcds", "csv", "-s", str(scale), "--tables=customer",
         f"--output-dir={out_dir}", "--overwrite", "--no-progress", "--quiet"],
        check=True,
    )
    files = sorted(out_dir.glob("customer*.csv"))
    if len(files) != 1:
        raise FileNotFoundError(f"expected one customer*.csv in {out_dir}, found {files}")
    return files[0]


def load_customer(box: Sandbox, database: str, csv_file: Path, table: str = "customer") -> int:
    """Create ``database.table`` and load ``csv_file`` into it; return the row count.

    The load is left out of the binlog (``sql_log_bin=0``): it is set-up, not a change to capture.
    """
    names = [name for name, _ in CUSTOMER_COLUMNS]
    variables = ", ".join(f"@v{i}" for i in range(len(names)))
    assignments = ", ".join(
        f"{quote_ident(name)} = NULLIF(@v{i}, '')" for i, name in enumerate(names)
    )
    load = (
        f"LOAD DATA INFILE %s INTO TABLE {quote_ident(table)} CHARACTER SET utf8mb4"
        " FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY ''"
        f" LINES TERMINATED BY '\\n' IGNORE 1 LINES ({variables}) SET {assignments}"
    )
    with contextlib.closing(box.admin.connect(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(customer_ddl(table))
        cur.execute(load, (str(csv_file),))
        cur.execute(f"SELECT COUNT(*) FROM {quote_ident(table)}")
        (count,) = cur.fetchone() or (0,)
        return int(count)
