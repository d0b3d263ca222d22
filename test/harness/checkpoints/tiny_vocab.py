"""The vocabulary every tiny checkpoint shares: its special ids, its WordLevel tokenizer, and
prompts whose length in tokens is exact.

Cheap to import (``tokenizers``/``transformers`` are imported when a tokenizer is written).
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2


def vocab_words(vocab: int) -> list[str]:
    """The tokenizer's vocabulary: three special tokens, then ``w3 .. w{vocab-1}``."""
    return [*SPECIAL_TOKENS, *(f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab))]


def prompt_text(num_words: int, start: int = 10) -> str:
    """A prompt made only of in-vocabulary words, so every word is exactly one token."""
    return " ".join(f"w{i}" for i in range(start, start + num_words))


def write_tokenizer(directory: Path, vocab: int) -> None:
    """Write a whitespace WordLevel tokenizer of exactly ``vocab`` tokens (``tokenizers`` lib)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = vocab_words(vocab)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins word tokens with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=1 << 20,
    )
    fast.save_pretrained(str(directory))
