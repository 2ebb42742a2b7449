"""``python -m fuzz``: the campaign command line (see ``fuzz.run``)."""

from __future__ import annotations

from fuzz.run import main

raise SystemExit(main())
