"""Scripted model providers the tests start on loopback, one module per provider's API."""
