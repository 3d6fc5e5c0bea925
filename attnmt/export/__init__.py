"""Trained runs written in other engines' formats: ctranslate2.py (CTranslate2's Transformer).

``QUANTIZATIONS`` lives here, without imports, so that ``attnmt --help`` lists the choices
without loading torch."""

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16", "float32")  # ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES
