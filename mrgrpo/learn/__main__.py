"""`python -m mrgrpo.learn ...` (see `mrgrpo.learn.cli`)."""

from mrgrpo.learn.cli import main

raise SystemExit(main())
