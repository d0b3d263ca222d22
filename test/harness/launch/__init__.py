"""Starting SGLang for tests and owning its processes, on CPU (and, shared, on a GPU runner)."""
