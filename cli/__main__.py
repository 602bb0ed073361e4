"""`python -m chronos_git.cli ...`: the standalone operator CLI."""
import sys

from .entry import main

sys.exit(main())
