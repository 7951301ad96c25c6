import sys

from benchmarks.finetune import main

sys.exit(main())
