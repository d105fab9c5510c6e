"""`python -m convdb ...`: the `convdb` command."""

import sys

from convdb.infra.cli.main import main

sys.exit(main())
