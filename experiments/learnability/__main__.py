"""``python -m learnability ...``: the study's tools (see `learnability.kit`)."""

from learnability.kit import main

raise SystemExit(main())
