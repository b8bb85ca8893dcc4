"""bootstorm.bootstorm."""
