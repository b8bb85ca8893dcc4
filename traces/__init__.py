"""bootstorm.traces."""
