"""Where runs execute: Ray sessions and clusters, code shipping, the watchdog, lost nodes, the pool."""
