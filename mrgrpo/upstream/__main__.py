"""`python -m mrgrpo.upstream` is `mrgrpo upstream`."""

from mrgrpo.upstream.cli import main

raise SystemExit(main())
