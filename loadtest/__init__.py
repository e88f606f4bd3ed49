"""`poolserve loadtest`: the load generator, its report and plots."""
