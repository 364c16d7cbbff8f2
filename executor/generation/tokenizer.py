"""A character-level tokenizer with a small fixed alphabet: nothing to download, every id is one character.

    ids:   0     1     2     3   4   ...  12    13  14  ...
           <pad> <bos> <eos> "0" "1" ...  "9"   "+" "-" ...
           └── special ──┘   └──────── ALPHABET, in order ───────┘

``encode`` maps text to ids (no special tokens added; it refuses characters outside the alphabet), ``decode`` maps
ids back to text, leaving special tokens out. The alphabet covers the shipped tasks of ``executor.tasks``; the policy
model is built with ``vocab_size`` = 3 + len(alphabet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
#: Digits and the few symbols the shipped tasks write; small on purpose, so a random policy hits the right character
#: often enough for reinforcement learning to get a signal.
ALPHABET = "0123456789+-=:"


@runtime_checkable
class Tokenizer(Protocol):
    """What tasks, learner and actors need of a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    pad_token_id: int
    bos_token_id: int
    eos_token_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class CharTokenizer:
    """One token per character of ``alphabet``, after the special tokens pad, bos and eos."""

    def __init__(self, alphabet: str = ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"alphabet: repeated characters in {alphabet!r}")
        self.alphabet = alphabet
        self.pad_token_id, self.bos_token_id, self.eos_token_id = range(len(SPECIAL_TOKENS))
        self._id_of = {character: index + len(SPECIAL_TOKENS) for index, character in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.alphabet)

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset((self.pad_token_id, self.bos_token_id, self.eos_token_id))

    def encode(self, text: str) -> list[int]:
        """The id of each character; a character outside the alphabet is a ValueError."""
        unknown = sorted(set(text) - self._id_of.keys())
        if unknown:
            raise ValueError(f"characters {unknown} are not in the tokenizer alphabet {self.alphabet!r}")
        return [self._id_of[character] for character in text]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of the ids, special tokens left out; an id outside the vocabulary is a ValueError."""
        characters = []
        for token in ids:
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} is outside the vocabulary of {self.vocab_size}")
            if token not in self.special_ids:
                characters.append(self.alphabet[token - len(SPECIAL_TOKENS)])
        return "".join(characters)

    def until_eos(self, ids: Iterable[int]) -> list[int]:
        """The ids before the first EOS (all of them if there is none)."""
        kept = []
        for token in ids:
            if token == self.eos_token_id:
                break
            kept.append(token)
        return kept
