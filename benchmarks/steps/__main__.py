import sys

from benchmarks.steps import main

sys.exit(main())
