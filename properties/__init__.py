"""Hypothesis strategies and properties of collectives, runnable against any
backend."""
