"""Pieces learners share: GAE, schedules and device placement."""
