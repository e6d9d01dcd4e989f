"""Serving a verified run: nothing is loaded that verify has not proved."""
