"""bootstorm.validation."""
