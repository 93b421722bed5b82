"""`python -m wdrbo_dist.cli`: the `wdrbo-dist` command (what a Ray job runs on the head)."""

import sys

from wdrbo_dist.cli import main

sys.exit(main())
