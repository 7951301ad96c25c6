import sys

from benchmarks.cost_accuracy import main

sys.exit(main())
