"""`python -m arcpipe ...` is the same as the `arcpipe` console script."""

import sys

from arcpipe.cli import main

sys.exit(main())
