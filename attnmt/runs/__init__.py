"""The run directory: what ``attnmt train`` writes and every other command reads.

checkpoint.py (layout, atomic checkpoints, LAST/BEST) · device.py (device names).
"""
