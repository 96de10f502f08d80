"""Models for the lessons: `toy` (a scanned MLP stack)."""
