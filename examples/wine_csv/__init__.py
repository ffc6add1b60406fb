"""A user's own tabular dataset (a CSV file) and model run through privsilo; see docs/your-own-work.md."""
