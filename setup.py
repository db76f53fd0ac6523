"""The compiled part of simdist: optional, every call has a Python path (simdist/sim/_repeated.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("simdist.sim._compiled", ["simdist/sim/_compiled.c"], optional=True)])
