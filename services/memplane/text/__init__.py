"""Text preparation for lexical search (CJK segmentation)."""
