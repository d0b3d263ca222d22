"""Test doubles for what a GPU-less machine lacks; never installed on a GPU run."""
