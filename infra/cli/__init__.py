"""The `convdb` command line: the composition root (may import every package)."""
