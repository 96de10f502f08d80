"""A training step compiled for a target: the trainer, the compiler, the report cache.
"""
