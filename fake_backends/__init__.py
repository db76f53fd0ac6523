"""Communicators that misbehave on purpose, for testing error handling and
property suites. Each wraps a real communicator and has one fault."""
