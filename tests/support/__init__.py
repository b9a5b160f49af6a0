"""Helpers the tests share: waits, fakes, scratch directories, logs of failures."""
