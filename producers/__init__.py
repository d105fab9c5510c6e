"""convdb producers."""
