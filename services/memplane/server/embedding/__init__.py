"""Embedding providers behind one interface (`Embedder`), plus a content-hash cache."""
