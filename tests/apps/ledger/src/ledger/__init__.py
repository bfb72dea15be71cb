"""Ledger entries posted by Celery workers."""
