"""What a step needs in HBM and host RAM, by formula, and the memory fraction that fits it.
"""
