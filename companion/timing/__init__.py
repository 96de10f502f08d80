"""What a step costs in seconds and how sure the lab is: rooflines, the schedule replayed, bands,
calibration against published runs.
"""
