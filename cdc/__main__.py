"""`python -m cdc`: the command-line interface (see cdc/cli.py)."""

from cdc.app.cli import main

raise SystemExit(main())
