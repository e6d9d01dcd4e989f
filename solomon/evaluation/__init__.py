"""Held-out scoring and calibration, shared by the training loop and the evaluate stage."""
