"""A small real application for sturdy.workers' tests and demo: a Celery worker on Redis, a web process
whose /health answers with the build it runs, and a re-runnable migration.

The build ID is baked into the package at build time (shopdemo/_build.py), so a process reports the code
it actually runs, not what its environment claims.
"""
