"""`python -m gcsckpt`: the command line (gcsckpt.cli)."""

import sys

from gcsckpt.cli import main

sys.exit(main())
