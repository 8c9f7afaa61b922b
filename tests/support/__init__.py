"""Helpers shared by tests that need real processes: a live PrivFit server and a browser."""
