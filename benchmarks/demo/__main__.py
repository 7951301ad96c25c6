import sys

from benchmarks.demo import main

sys.exit(main())
