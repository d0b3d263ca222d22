"""What the releases with a dataclass ``ServerArgs`` (resolved in ``__post_init__``) share:
launch checks that read its fields and the planner's server-args replay."""
