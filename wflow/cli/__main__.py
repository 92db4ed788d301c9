"""``python -m wflow.cli``: the ``wflow`` command."""

import sys

from wflow.cli import main

sys.exit(main())
