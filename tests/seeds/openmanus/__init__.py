"""Differential tests against OpenManus 0.1.0 (``openmanus`` on PyPI, package ``app``)."""
