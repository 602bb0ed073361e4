"""`python -m chronos_git.cli ...`: the standalone operator CLI."""
import sys

from .main import main

sys.exit(main())
