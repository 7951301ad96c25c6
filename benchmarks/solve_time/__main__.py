import sys

from benchmarks.solve_time import main

sys.exit(main())
