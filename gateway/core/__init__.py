"""Plumbing every room uses and none owns: the clock, ids, JSON, the error
family and its codes, settings, logs and metrics.  Imports nothing else of
the gateway."""
