"""Ray wiring: starting and joining Ray, the Ape-X actors, actor-death errors."""
