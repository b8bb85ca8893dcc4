"""bootstorm.models."""
