"""convdb consumers."""
