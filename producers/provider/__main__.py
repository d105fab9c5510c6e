"""`python -m producers.provider --port P`: run the demo issue tracker until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from producers.provider.server import ProviderState, ReceiptTarget, make_server


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m producers.provider")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    parser.add_argument("--receipts-url", help="POST a signed receipt here after each issue")
    parser.add_argument("--provider-name", default="tracker")
    parser.add_argument("--receipt-secret", default="", help="HMAC-SHA256 key for receipts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    receipts = (
        ReceiptTarget(args.receipts_url, args.provider_name, args.receipt_secret)
        if args.receipts_url
        else None
    )
    server = make_server(args.port, ProviderState(receipts=receipts), args.host)

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"tracker ready on http://{args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
