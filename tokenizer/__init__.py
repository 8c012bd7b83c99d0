"""archlab's byte-level BPE tokenizer, written from scratch (pure Python + `regex`).

    from tokenizer import Tokenizer, train_bpe, train_bpe_from_iterator
"""

from tokenizer.tokenizer import Tokenizer
from tokenizer.train import train_bpe, train_bpe_from_iterator

__all__ = ["Tokenizer", "train_bpe", "train_bpe_from_iterator"]
