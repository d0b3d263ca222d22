"""What the test/unit modules share: no SGLang process reaches the Hugging Face hub."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
