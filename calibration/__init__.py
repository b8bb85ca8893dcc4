"""bootstorm.calibration."""
