"""Running on a real accelerator, and the lab's predictions held against it.
"""
