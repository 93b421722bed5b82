"""DRBO-MMD's numerics, shared by DRBO-MMD and its minimax approximation: the context grid and
its pmf, PSD-safe Gram factors, the conic inner problem and its compiled working-set solver."""
