"""Data in: corpora, the content-addressed tokenizer/token cache, token files and seq2seq pairs.

    cache.py          prepare_data: corpus -> tokenizer -> token arrays, cached by content hash
    corpus.py         corpus sources (embedded, text files, token files, datasets) and the (x, y) window sampler
    pairs.py          prepare_pairs: (source, target) text pairs -> padded id batches
    seq2seq_tasks.py  built-in synthetic seq2seq tasks (copy, reverse, sort, addition)
"""
