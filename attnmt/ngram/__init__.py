"""Back-off n-gram language models: modified Kneser–Ney estimation, ARPA/binary I/O, and batched
full-vocabulary queries in torch. See :mod:`attnmt.ngram.model` for the API and its conventions.
"""

from attnmt.ngram.model import NEG, NgramLM, load_ngram

__all__ = ["NEG", "NgramLM", "load_ngram"]
