"""Stores: every SQL statement txqueue issues lives in this package."""
