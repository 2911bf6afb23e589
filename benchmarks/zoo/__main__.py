import sys

from benchmarks.zoo.runner import main

sys.exit(main())
