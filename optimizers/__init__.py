"""bootstorm.optimizers."""
