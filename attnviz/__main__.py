"""``python -m attnviz``: the command line."""

import sys

from attnviz.cli import main

sys.exit(main())
