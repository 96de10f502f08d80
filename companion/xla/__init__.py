"""Reading what XLA wrote: scheduled HLO, buffer assignment, transfer descriptors.
"""
