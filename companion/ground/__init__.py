"""Vocabulary and provenance, importing nothing of the package: notation, caveats, MaxText's policy names,
logical axes, where the training state lives, the platform being lowered for, the layers, the source stamp.
"""
