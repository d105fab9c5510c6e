"""convdb projections."""
