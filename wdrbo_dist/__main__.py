"""`python -m wdrbo_dist`: the `wdrbo-dist` command."""

import sys

from wdrbo_dist.cli import main

sys.exit(main())
