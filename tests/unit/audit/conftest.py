"""Audit unit tests: pure transforms on hand-built DataFrames in the shared local session."""

from tests.audit_spark import spark

__all__ = ["spark"]
