"""The models silos train: the built-in catalogue and the checks of a user's model."""
