"""`python -m mrgrpo ...` is the `mrgrpo` command (useful where the console script is not on PATH)."""

from mrgrpo.cli import main

raise SystemExit(main())
