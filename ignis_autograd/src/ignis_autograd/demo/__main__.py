"""``python -m ignis_autograd.demo``: train the character-level GPT (see ``--help``)."""

from .cli import main

raise SystemExit(main())
