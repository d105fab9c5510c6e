"""The dev floor: embedded and Apache Kafka brokers, the local S3, the dev stack and the demo's
issue tracker. Only the CLI, the tests and the benchmarks import it (`tests/test_layering.py`)."""
