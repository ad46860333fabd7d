"""``python -m benchmarks``: run the harness (see :mod:`benchmarks.run`)."""
import sys

from .run import main

sys.exit(main())
