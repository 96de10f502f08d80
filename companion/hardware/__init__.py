"""The accelerators, their host links and topologies, XLA's and libtpu's flags, the fits rule.
"""
