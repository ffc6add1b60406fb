"""Examples of users' own work run through privsilo (importable from the repository root)."""
