import sys

from benchmarks.deep import main

sys.exit(main())
