"""Tiny HF checkpoints and config-only models for the CPU tests, generated locally from a seed."""
