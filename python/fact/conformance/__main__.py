"""`python -m fact.conformance`: the command line (cli.py). The GPU run's workers are started
the same way (`-m fact.conformance --worker` / `--prepare-worker`)."""
import sys

from fact.conformance.cli import main

sys.exit(main())
