import sys

from benchmarks.longest_sequence import main

sys.exit(main())
