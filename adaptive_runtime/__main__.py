"""``python -m adaptive_runtime``: the ``adaptive-runtime`` command."""

from .cli import main

raise SystemExit(main())
