"""`python -m mrgrpo.upstream` is `mrgrpo upstream`."""

from mrgrpo.upstream import main

raise SystemExit(main())
