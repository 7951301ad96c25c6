import sys

from benchmarks.frontier import main

sys.exit(main())
