"""Acquisition functions (one module each) and the optimiser of spec 1.6."""
