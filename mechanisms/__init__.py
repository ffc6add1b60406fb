"""Privacy mechanisms: pure, Ray-free plug-ins behind ``privsilo.mechanisms.base.Mechanism``."""
