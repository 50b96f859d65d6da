"""``python -m autagent.cli``: what sweeps, the launcher and the tests start."""

import sys

from . import main

sys.exit(main())
