"""What SGLang's scheduler process saw at init, written from inside it, and reading it back."""
