"""Corpus builders and generators (``attnmt data …``): they write text files that training reads.

bible.py, sword.py, versification.py, debian.py (the English–Spanish Bible from Debian's SWORD
modules) · domains.py, domain_text.py (English text of several domains) · synthetic.py (parallel
data with gold alignments) · agreement.py (subject–verb agreement) · outputs.py (atomic,
manifest-checked output directories). Nothing here is imported by training or decoding.
"""
