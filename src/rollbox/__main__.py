"""``python -m rollbox``: the command line."""

from rollbox.cli import main

raise SystemExit(main())
