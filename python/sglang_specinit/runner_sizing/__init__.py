"""What the releases whose ``ModelRunner`` sizes and builds its own pools share: a runner
without weights, for the planner."""
