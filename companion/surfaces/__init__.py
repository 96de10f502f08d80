"""What a learner or a terminal sees: tables, figures, widgets, the command line.
"""
