"""Trained runs written in other engines' formats: ctranslate2.py (CTranslate2's Transformer)."""
