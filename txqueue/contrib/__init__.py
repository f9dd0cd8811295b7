"""Integrations with frameworks, each an optional extra."""
