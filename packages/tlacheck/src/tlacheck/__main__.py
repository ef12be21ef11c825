"""``python -m tlacheck``: the ``tlacheck`` command."""

import sys

from tlacheck.cli import main

sys.exit(main())
