"""`python -m cdc`: the command-line interface (see cdc/cli.py)."""

from cdc.cli import main

raise SystemExit(main())
