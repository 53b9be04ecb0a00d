from __future__ import annotations

import sys

from retold.cli import main

sys.exit(main())
