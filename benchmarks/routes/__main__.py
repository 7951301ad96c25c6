import sys

from benchmarks.routes import main

sys.exit(main())
