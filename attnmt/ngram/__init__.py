"""Back-off n-gram language models: modified Kneser–Ney estimation (in memory, or streamed in
bounded memory), ARPA/binary I/O, and batched full-vocabulary queries in torch. See
:mod:`attnmt.ngram.model` for the API and its conventions.
"""

__all__ = ["NEG", "NgramLM", "load_ngram"]


def __getattr__(name: str):
    # Lazy: building a model from text (attnmt.ngram.stream) needs numpy only, not torch.
    if name in __all__:
        from attnmt.ngram import model

        return getattr(model, name)
    raise AttributeError(f"module 'attnmt.ngram' has no attribute {name!r}")
