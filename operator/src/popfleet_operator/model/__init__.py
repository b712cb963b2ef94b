"""Parsed specs and the names, labels and ports every other layer agrees on (pure)."""
