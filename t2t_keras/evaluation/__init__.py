"""Scoring translations and parses against references."""
