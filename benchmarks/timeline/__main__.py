import sys

from benchmarks.timeline import main

sys.exit(main())
