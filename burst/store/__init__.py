"""Where state lives: the engine, sessions, fencing and migrations (database), and the tables."""
