"""`python -m shop.report`: what the shop's providers did, per operation id (JSON).

It reads the same settings as convdb's commands (`convdb.load_settings()`), so it finds the
providers' file under the same data dir as the runner that called them.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no model-price download at import

import convdb  # noqa: E402
from shop.provider import Provider  # noqa: E402


def main() -> None:
    """Print the providers' records."""
    settings = convdb.load_settings()
    print(json.dumps(Provider(settings.data_dir / "shop-provider.sqlite").report(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
