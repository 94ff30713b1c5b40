"""`python -m constrained` is the `constrained` command."""

from constrained.cli import run

run()
