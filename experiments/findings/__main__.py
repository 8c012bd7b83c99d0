import sys

from experiments.findings.cli import main

sys.exit(main())
