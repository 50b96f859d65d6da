"""Helpers that several test modules share (``from helpers.serve import InThread``): a test module
imports no other test module."""
