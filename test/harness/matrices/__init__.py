"""Rows of the suite's launch matrices, and the probes that run them."""
