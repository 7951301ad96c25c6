import sys

from benchmarks.architectures import main

sys.exit(main())
