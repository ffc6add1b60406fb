"""Privacy mechanisms: pure, Ray-free plug-ins behind ``mechanisms.base.Mechanism``."""
