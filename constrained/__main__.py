"""`python -m constrained` is the `constrained` command."""

import sys

from constrained.cli import main

sys.exit(main())
