import sys

from benchmarks.gpu import main

sys.exit(main())
