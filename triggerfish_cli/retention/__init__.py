"""Retention: policies, the pure plan and its rules, and the sweep that applies it."""
