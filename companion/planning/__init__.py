"""What to run: the planner, MaxText configs in and plans out, a series' answer.
"""
