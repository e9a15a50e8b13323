"""Hybrid retrieval: vector + lexical candidates, fused (RRF or weighted), merged over queries."""
