"""What the phased releases share: SGLang loads both models before sizing; we price the draft."""
