"""``python -m popfleet_audit``: the same as ``popfleet-audit``."""

import sys

from popfleet_audit.main import main

sys.exit(main())
