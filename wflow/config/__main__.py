"""``python -m wflow.config write|check|--toml|--markdown``: the generated configuration files."""

import sys

from wflow.config.files import main

sys.exit(main())
