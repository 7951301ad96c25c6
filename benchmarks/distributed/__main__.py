import sys

from benchmarks.distributed import main

sys.exit(main())
