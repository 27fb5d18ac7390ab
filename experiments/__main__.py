"""`python -m experiments`: the `nnbench` command."""
import sys

from experiments.cli import main

sys.exit(main())
