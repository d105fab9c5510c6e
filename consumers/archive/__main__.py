"""`python -m consumers.archive`: run the archive sink service (same as `convdb consume archive`)."""

from __future__ import annotations

import logging
import sys

from consumers.archive.service import serve
from infra import devstack
from infra.settings import Settings
from schemas.errors import ConvdbError

logger = logging.getLogger("consumers.archive")


def main() -> int:
    """Entry point: settings from the environment, exit 1 on an infrastructure error."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return serve(devstack.resolve(Settings()))
    except ConvdbError as exc:
        logger.error("archive consumer stopped: %s: %s", type(exc).__name__, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
