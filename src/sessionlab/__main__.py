"""`python -m sessionlab`: the same as the `sessionlab` command."""

from sessionlab.cli import main

raise SystemExit(main())
