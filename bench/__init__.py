"""Benchmarks: convdb against the ceiling (raw librdkafka, raw fastavro) and a file-per-event log."""
