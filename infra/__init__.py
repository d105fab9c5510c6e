"""convdb infra."""
