"""``python -m stratalog.cli`` runs the ``stratalog`` command."""

import sys

from .main import main

sys.exit(main())
