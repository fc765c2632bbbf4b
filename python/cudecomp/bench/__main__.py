"""``python -m cudecomp.bench``: run the benchmark CLI."""

from ._cli import main

raise SystemExit(main())
