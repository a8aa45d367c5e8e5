"""Frozen input specifications: model, hardware, training."""
