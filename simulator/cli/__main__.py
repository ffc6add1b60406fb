"""``python -m privsilo.simulator.cli ARGV``: the ``privsilo`` command."""
from privsilo.simulator.cli.main import entry_point

if __name__ == "__main__":
    entry_point()
